"""CoVe's named sizes: a table without torch, so that the command line lists them without importing the model."""

# Named sizes (E comes from the vectors). "paper": McCann et al.; "small": what a CPU trains in minutes.
PRESETS: dict[str, dict] = {
    "paper": dict(hidden_dim=300, decoder_dim=300, target_embedding_dim=300, dropout=0.2),
    "small": dict(hidden_dim=128, decoder_dim=256, target_embedding_dim=128, dropout=0.2),
    "tiny": dict(hidden_dim=8, decoder_dim=12, target_embedding_dim=6, dropout=0.0),
}
