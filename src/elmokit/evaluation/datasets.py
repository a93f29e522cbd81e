"""The benchmark data sets ``elmokit eval`` names: tables without numpy or torch, so that the command line
lists them without importing the evaluations."""

# name -> (path under data/wordsim, human name)
SIMILARITY_DATASETS: dict[str, tuple[str, str]] = {
    "ws353": ("eval-word-vectors/EN-WS-353-ALL.txt", "WordSim-353 (all)"),
    "ws353-sim": ("eval-word-vectors/EN-WS-353-SIM.txt", "WordSim-353 similarity"),
    "ws353-rel": ("eval-word-vectors/EN-WS-353-REL.txt", "WordSim-353 relatedness"),
    "simlex999": ("eval-word-vectors/EN-SIMLEX-999.txt", "SimLex-999"),
    "men": ("eval-word-vectors/EN-MEN-TR-3k.txt", "MEN (3k)"),
    "rw": ("eval-word-vectors/EN-RW-STANFORD.txt", "Stanford Rare Words"),
    "simverb3500": ("eval-word-vectors/EN-SimVerb-3500.txt", "SimVerb-3500"),
    "mturk771": ("eval-word-vectors/EN-MTurk-771.txt", "MTurk-771"),
    "rg65": ("eval-word-vectors/EN-RG-65.txt", "RG-65"),
    "mc30": ("eval-word-vectors/EN-MC-30.txt", "MC-30"),
}
ANALOGY_DATASETS: dict[str, tuple[str, str]] = {
    "google": ("gensim/questions-words.txt", "Google analogies (Mikolov et al. 2013)"),
    "msr": ("vecto-word-benchmarks/word-analogy__msr.csv", "MSR syntactic analogies"),
}
DEFAULT_SIMILARITY = ("ws353", "ws353-sim", "ws353-rel", "simlex999", "men", "rw", "simverb3500")
DEFAULT_ANALOGY = ("google", "msr")

# The tagging benchmarks of each task (``elmokit.evaluation.tagging.DATASETS`` says where each one's files are).
POS_DATASETS = ["ewt"]
NER_DATASETS = ["wikiann", "wnut17", "conll2003"]
CWS_DATASETS = ["pku_cws"]
CHINESE_DATASETS = {"ner": ["weibo", "resume"], "cws": ["pku_cws"], "pos": ["pd_pos"]}

# The sentence and sentence-pair tasks of ``elmokit eval glue`` (``elmokit.evaluation.glue.TASKS`` holds their
# metrics and readers, in this order).
GLUE_TASKS = ("cola", "sst2", "mrpc", "stsb", "rte", "wnli", "sick-e", "sick-r")
