"""Screenshots of the explorer page (docs/explorer/*.png), one per view, from a real `elmokit serve`.

    python docs/explorer/make_screenshots.py [--out docs/explorer] [--sentences 300]

In a temporary folder it builds, from the shared UD English EWT data (../shared/data, or
$ELMOKIT_SHARED/data): a neighbour index of a few hundred sentences with the shipped default model
(every training sentence holding the word "play", then the first others up to --sentences), and a
small POS tagger trained for a few epochs (for its learned layer weights). Then it starts
`elmokit serve --model default --index ... --task-model ...` on a free 127.0.0.1 port, drives
Debian's chromium with Playwright through the four views, and saves one PNG per view.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from elmokit.data_paths import shared_data

SENTENCE = "Chico Ruiz made a spectacular play on Alusik 's grounder"
SECOND = "The umpire stopped play after Ruiz made a grounder"
VIEWS = ("neighbors", "similarity", "projection", "weights")


def conllu_blocks(path: Path) -> list[str]:
    return [block for block in path.read_text(encoding="utf-8").split("\n\n") if block.strip()]


def block_text(block: str) -> str:
    for line in block.splitlines():
        if line.startswith("# text = "):
            return line[len("# text = "):]
    return ""


def elmokit(*args: str) -> None:
    command = [sys.executable, "-m", "elmokit.cli.main", *args]
    print("$ elmokit " + " ".join(args), file=sys.stderr, flush=True)
    subprocess.run(command, check=True)


def start_server(*args: str) -> tuple[subprocess.Popen, str]:
    process = subprocess.Popen([sys.executable, "-m", "elmokit.cli.main", "serve", "--port", "0", *args],
                               stderr=subprocess.PIPE, text=True)
    found: list[str] = []
    ready = threading.Event()

    def read():
        for line in process.stderr:
            sys.stderr.write(line)
            match = re.search(r"listening on (http://127\.0\.0\.1:\d+)", line)
            if match:
                found.append(match.group(1))
                ready.set()
        ready.set()

    threading.Thread(target=read, daemon=True).start()
    if not ready.wait(300) or not found:
        process.kill()
        raise SystemExit("elmokit serve did not start")
    import httpx

    for _ in range(600):
        try:
            if httpx.get(found[0] + "/health", timeout=5).status_code == 200:
                return process, found[0]
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    process.kill()
    raise SystemExit("elmokit serve did not answer /health")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(Path(__file__).resolve().parent), help="folder for the PNGs")
    parser.add_argument("--sentences", type=int, default=300, help="sentences in the neighbour index (default 300)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads of each process (default 1)")
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    ud = shared_data("ud_english_ewt")
    if not (ud / "en_ewt-ud-train.conllu").is_file():
        raise SystemExit(f"{ud}: the UD English EWT data is missing (see docs/serve.md)")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    threads = ["--threads", str(args.threads)]
    with tempfile.TemporaryDirectory(prefix="elmokit-explorer-") as tmp:
        tmp = Path(tmp)
        train = conllu_blocks(ud / "en_ewt-ud-train.conllu")
        texts = [block_text(b) for b in train]
        with_play = [t for t in texts if re.search(r"\bplay\b", t, re.IGNORECASE)]
        others = [t for t in texts if t and t not in with_play][: max(0, args.sentences - len(with_play))]
        (tmp / "corpus.txt").write_text("\n".join(with_play + others) + "\n", encoding="utf-8")
        (tmp / "train.conllu").write_text("\n\n".join(train[:500]) + "\n\n", encoding="utf-8")
        dev = conllu_blocks(ud / "en_ewt-ud-dev.conllu")[:150]
        (tmp / "dev.conllu").write_text("\n\n".join(dev) + "\n\n", encoding="utf-8")
        elmokit("neighbors", "index", "--model", "default", "--corpus", str(tmp / "corpus.txt"), "--out",
                str(tmp / "index"), "--tokenizer", "regex", "--dtype", "float32", *threads)
        elmokit("tag", "train", "--format", "conllu", "--train", str(tmp / "train.conllu"), "--dev",
                str(tmp / "dev.conllu"), "--out", str(tmp / "pos-tagger"), "--model", "default", "--output", "softmax",
                "--elmo-at-output", "--epochs", "4", "--seed", "0", *threads)
        process, url = start_server("--model", "default", "--index", str(tmp / "index"), "--task-model",
                                    str(tmp / "pos-tagger"), "--tokenizer", "regex", *threads)
        try:
            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(executable_path=shutil.which("chromium"), args=["--no-sandbox"])
                page = browser.new_page(viewport={"width": 1100, "height": 860}, device_scale_factor=1)
                page.goto(url + "/")
                page.wait_for_selector("#layer-buttons button")
                page.fill("#sentence", SENTENCE)
                page.select_option("#neighbors-top", "3")
                page.click("#run")
                page.wait_for_selector("#view-neighbors[data-state=ready]", timeout=120_000)
                page.screenshot(path=str(out / "neighbors.png"))
                page.click("#tabs button[data-view=similarity]")
                page.fill("#sentence-b", SECOND)
                page.click("#similarity-form button[type=submit]")
                page.wait_for_selector("#view-similarity[data-state=ready]", timeout=120_000)
                page.screenshot(path=str(out / "similarity.png"))
                page.click("#tabs button[data-view=projection]")
                page.wait_for_selector("#view-projection[data-state=ready]", timeout=120_000)
                page.screenshot(path=str(out / "projection.png"), full_page=True)  # with the clusters legend
                page.click("#tabs button[data-view=weights]")
                page.wait_for_selector("#view-weights[data-state=ready]", timeout=120_000)
                page.screenshot(path=str(out / "layer-weights.png"))
                browser.close()
        finally:
            process.terminate()
            process.wait(60)
    for name in ("neighbors", "similarity", "projection", "layer-weights"):
        path = out / f"{name}.png"
        print(f"{path}: {path.stat().st_size / 1024:.0f} KB", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
