"""The explorer page as users meet it: Debian's chromium (headless, driven by Playwright) on a real
uvicorn server on a free 127.0.0.1 port, with a tiny neighbour index and tiny saved task models.
Each of the four views is clicked through and its DOM checked against the API's numbers: a hit row per
neighbour, n1 * n2 heatmap cells, a point per occurrence, a bar per layer. One browser for the module."""

from __future__ import annotations

import shutil

import pytest

pytest.importorskip("fastapi", reason="needs the serve extra: pip install 'elmokit[serve]' httpx")
pytest.importorskip("httpx", reason="needs httpx")
sync_api = pytest.importorskip("playwright.sync_api", reason="needs Playwright for Python: pip install playwright")
if shutil.which("chromium") is None:
    pytest.skip("needs a chromium executable on PATH (Debian: apt-get install chromium); Playwright's own browser "
                "download is not used", allow_module_level=True)

from serve_testkit import running, tiny_classifier, tiny_index, tiny_tagger  # noqa: E402

from elmokit.serve import explorer  # noqa: E402

SENTENCE = "the umpire saw a play on the bank"
SECOND = "IBM made a loan"


@pytest.fixture(scope="module")
def browser():
    with sync_api.sync_playwright() as playwright:
        try:
            chromium = playwright.chromium.launch(executable_path=shutil.which("chromium"), args=["--no-sandbox"])
        except sync_api.Error as error:
            pytest.skip(f"chromium did not start under Playwright: {str(error).splitlines()[0]}")
        yield chromium
        chromium.close()


@pytest.fixture(scope="module")
def full_server(tmp_path_factory, server_embedder):
    folder = tmp_path_factory.mktemp("explorer-page")
    index = tiny_index(server_embedder, folder / "index")
    tasks = [explorer.read_task_layer_weights(tiny_tagger(folder / "pos-tagger")),
             explorer.read_task_layer_weights(tiny_classifier(folder / "classifier"))]
    with running(server_embedder, index=index, task_models=tasks) as server:
        yield server


def _open(browser, server):
    page = browser.new_page(viewport={"width": 1100, "height": 900})
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
    page.goto(server.url + "/")
    page.wait_for_selector("#layer-buttons button")
    page.fill("#sentence", SENTENCE)
    page.click("#run")
    return page, errors


def _ready(page, view: str) -> None:
    page.click(f"#tabs button[data-view={view}]")
    page.wait_for_selector(f"#view-{view}[data-state=ready]", timeout=15000)


@pytest.mark.slow  # an end-to-end run of 2-4 s; the default suite stays under a minute, CI runs it with -m slow
def test_the_four_views_draw_what_the_api_answers(browser, full_server):
    page, errors = _open(browser, full_server)
    client = full_server.client
    n = len(SENTENCE.split())

    # 1. nearest occurrences: a block per word, `top` rows each, the top layer first
    page.wait_for_selector("#view-neighbors[data-state=ready]", timeout=15000)
    api = client.post("/v1/explorer/neighbors", json={"inputs": SENTENCE, "top": 5}).json()
    assert page.locator(".word-block").count() == n
    assert page.locator(".neighbor-row").count() == sum(len(w["neighbors"]) for w in api["layers"][2]["words"]) == 5 * n
    first = api["layers"][2]["words"][4]["neighbors"][0]
    block = page.locator(".word-block[data-position='4']")
    assert block.locator("mark").first.inner_text() == first["word"]
    assert block.locator("td.score").first.inner_text() == f"{first['score']:.3f}"
    page.click("#layer-buttons button[data-layer='0']")  # another layer: redrawn from the same answer
    assert page.locator("#neighbors-list").get_attribute("data-layer") == "0"
    layer0 = api["layers"][0]["words"][4]["neighbors"][0]
    assert block.locator("td.score").first.inner_text() == f"{layer0['score']:.3f}"
    page.click("#layer-buttons button[data-layer='2']")

    # 2. the heatmap: n1 * n2 cells holding the API's cosines
    page.click("#tabs button[data-view=similarity]")
    page.fill("#sentence-b", SECOND)
    page.click("#similarity-form button[type=submit]")
    page.wait_for_selector("#view-similarity[data-state=ready]")
    page.wait_for_function(f"document.querySelectorAll('#heatmap rect.cell').length === {n * 4}")
    cosine = client.post("/v1/explorer/similarity", json={"a": SENTENCE, "b": SECOND}).json()["cosine"][2]
    value = float(page.locator("#heatmap rect.cell[data-row='4'][data-col='2']").get_attribute("data-value"))
    assert value == pytest.approx(cosine[4][2], abs=1e-6)
    assert page.locator("#heatmap text.row-label").all_text_contents() == SENTENCE.split()

    # 3. the projection of "play" (the middle word is picked first): a point per occurrence, and a star
    _ready(page, "projection")
    projection = client.post("/v1/explorer/projection", json={"inputs": SENTENCE, "position": 4, "layer": 2}).json()
    assert page.locator(".word-chip[aria-pressed=true]").inner_text() == "play"
    assert page.locator("#projection circle.point").count() == projection["n_occurrences"] >= 8
    assert page.locator("#projection polygon.query-point").count() == 1
    colours = page.locator("#projection circle.point").evaluate_all("els => els.map(e => e.dataset.cluster)")
    assert colours == [str(p["cluster"]) for p in projection["points"]]
    assert page.locator("#projection-legend .cluster").count() == projection["clusters"] == 2
    page.click(".word-chip[data-position='7']")  # "bank"
    page.wait_for_function("document.querySelector('#projection svg').getAttribute('aria-label').includes('bank')")
    bank = client.post("/v1/explorer/projection", json={"word": "bank", "layer": 2}).json()
    assert page.locator("#projection circle.point").count() == bank["n_occurrences"] >= 4

    # 4. layer weights: a bar per layer of each mix, heights in the order of softmax(w)
    _ready(page, "weights")
    weights = client.get("/v1/explorer/layer-weights").json()["task_models"]
    assert page.locator(".task-model").count() == 2
    assert page.locator("svg.weights-chart").count() == sum(len(t["mixes"]) for t in weights) == 3
    bars = page.locator(".task-model[data-name=pos-tagger] svg[data-mix=input] rect.weight-bar")
    assert bars.count() == 3
    shown = [float(v) for v in bars.evaluate_all("els => els.map(e => e.dataset.value)")]
    assert shown == pytest.approx(weights[0]["mixes"][0]["softmax_w"], abs=1e-6)
    heights = bars.evaluate_all("els => els.map(e => Number(e.getAttribute('height')))")
    assert sorted(range(3), key=heights.__getitem__) == sorted(range(3), key=shown.__getitem__)
    assert errors == []
    page.close()


@pytest.mark.slow  # an end-to-end run of 2-4 s; the default suite stays under a minute, CI runs it with -m slow
def test_without_index_or_task_models_each_view_says_so(browser, server):
    page, errors = _open(browser, server)
    page.wait_for_selector("#view-neighbors[data-state=unavailable]")
    assert "--index" in page.locator("#view-neighbors .notice").inner_text()
    assert page.locator(".neighbor-row").count() == 0
    _ready(page, "similarity")  # needs only the model
    assert page.locator("#heatmap rect.cell").count() == len(SENTENCE.split()) * 9
    page.click("#tabs button[data-view=projection]")
    page.wait_for_selector("#view-projection[data-state=unavailable]")
    assert "--index" in page.locator("#view-projection .notice").inner_text()
    page.click("#tabs button[data-view=weights]")
    page.wait_for_selector("#view-weights[data-state=unavailable]")
    assert "--task-model" in page.locator("#view-weights .notice").inner_text()
    assert errors == []
    page.close()
