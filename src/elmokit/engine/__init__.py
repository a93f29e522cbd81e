"""The training engine: knows no model. Everything that trains in elmokit runs on it.

- the run folder (open, refuse, resume; the run record read once; one ``command.txt``; the card skeleton),
- the step loop (seeding, DDP, CPU-second budgets, metrics, checkpoint rotation, exact resume, the
  non-finite policy),
- the epoch loop with dev early stopping for task models,
- the learning-rate schedules.

A recipe (the biLM, a pretraining objective, distillation, CoVe's translation model, a tagger, a
classifier, fine-tuning, ULMFiT) supplies only its model, its batches, its loss and its export.
Import the pieces from their modules (``elmokit.engine.steps``, ``elmokit.engine.epochs``, ...).
"""
