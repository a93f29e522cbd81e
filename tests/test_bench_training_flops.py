"""benchmarks/bench_training.py's FLOP counts, against hand-computed values."""

from testkit import load_benchmark

from elmokit.bilm import BiLMConfig


def test_model_and_executed_token_encoder_flops_by_hand(monkeypatch):
    script = load_benchmark("bench_training")
    config = BiLMConfig(char_embedding_dim=2, filters=((1, 2), (3, 4)), n_highway=1, lstm_dim=8, projection_dim=4,
                        n_layers=1)
    sentences = [["ab", "ab"], ["c"]]  # distinct spellings: "ab" (4 chars with BOW/EOW), "c" (3), + <S>, </S> (3 each)
    highway_and_projection = 1 * 2 * 2 * 6 * 6 + 2 * 6 * 4  # F = 6 filters
    # one group, longest spelling 4 characters: 4 windows of width 1, 4 of width 3 (of 50 and 48)
    cnn_executed = 4 * (2 * 4 * 1 * 2 * 2) + 4 * (2 * 4 * 3 * 2 * 4)
    assert script.executed_token_encoder_flops(config, sentences, highway_and_projection) == (
        cnn_executed + 4 * highway_and_projection)

    monkeypatch.setattr("elmokit.nn.char_encoder._GROUP_SIZE", 2)  # groups [4, 3] and [3, 3]
    grouped = 2 * (2 * 4 * 1 * 2 * 2 + 2 * 4 * 3 * 2 * 4) + 2 * (2 * 3 * 1 * 2 * 2 + 2 * 3 * 3 * 2 * 4)
    assert script.executed_token_encoder_flops(config, sentences, highway_and_projection) == (
        grouped + 4 * highway_and_projection)

    counts = script.flops_per_step(config, sentences, None, 10)
    positions = 4 + 3  # <S> + tokens + </S> per sentence
    cnn_model = 2 * 50 * 1 * 2 * 2 + 2 * 48 * 3 * 2 * 4  # every window of every position
    assert counts["forward"]["token_encoder"] == positions * (cnn_model + highway_and_projection)
    assert counts["executed_training"] < counts["training"]
    assert counts["training"] - counts["executed_training"] == 3 * (
        counts["forward"]["token_encoder"] - grouped - 4 * highway_and_projection)
