"""Schema fuzzing: schemathesis generates requests from the server's own /openapi.json (valid and
invalid bodies) and sends them over real HTTP to a live 127.0.0.1 server with a tiny model; no
request may get a 5xx. A few examples per operation in the default suite, many under -m slow."""

import pytest

pytest.importorskip("fastapi")
schemathesis = pytest.importorskip("schemathesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis.errors import Unsatisfiable  # noqa: E402
from schemathesis.checks import not_a_server_error  # noqa: E402


def fuzz(server, max_examples: int) -> dict[str, int]:
    """Send ``max_examples`` generated requests (derandomized: the same each run) of each mode
    (positive: valid per the schema; negative: not) to every operation; return how many each got.
    Fails on the first 5xx, naming the request."""
    schema = schemathesis.openapi.from_url(server.url + "/openapi.json")
    sent: dict[str, int] = {}
    for result in schema.get_all_operations():
        operation = result.ok()
        for mode in schemathesis.GenerationMode:  # bodies the schema allows, and bodies it does not
            fuzz_operation(operation, mode, f"{operation.method.upper()} {operation.path}", server.url, max_examples, sent)
    return sent


def fuzz_operation(operation, mode, label: str, url: str, max_examples: int, sent: dict[str, int]) -> None:
    @settings(max_examples=max_examples, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    @given(case=operation.as_strategy(mode))
    def send(case):
        response = case.call_and_validate(base_url=url, checks=[not_a_server_error], timeout=30)
        assert response.status_code < 500, f"{label}: {response.status_code} {response.text[:300]}"
        sent[label] = sent.get(label, 0) + 1

    try:
        send()
    except Unsatisfiable:  # no invalid request exists for a GET (or HEAD) without parameters
        assert mode is schemathesis.GenerationMode.NEGATIVE and operation.method.upper() in ("GET", "HEAD"), label


@pytest.mark.slow  # fuzzes every endpoint (~6 s): the default suite stays under a minute; CI runs -m slow
def test_generated_requests_never_get_a_5xx(server):
    sent = fuzz(server, max_examples=3)
    # every POST route of the API was fuzzed, not just a few
    assert {"POST /embed", "POST /embed_all", "POST /tokenize", "POST /v1/embeddings", "POST /v1/elmo"} <= set(sent)
    assert all(count >= 1 for count in sent.values())


@pytest.mark.slow
def test_many_generated_requests_never_get_a_5xx(server):
    sent = fuzz(server, max_examples=150)
    assert sum(sent.values()) >= 500
