"""Lighthouse on the built book, served as GitHub Pages serves it (gzip): the page-weight table.

    npm ci --prefix benchmarks/lighthouse          # once: Lighthouse 12.8.2, pinned
    python benchmarks/lighthouse.py --build _build/html
    python benchmarks/lighthouse.py --build _build/html --before /tmp/old/html   # interleaved
    python benchmarks/lighthouse.py --build _build/html --pages book/10_the_loss --modes mobile

For every page (default: chapters 1, 10, 17 and the glossary) and mode (mobile: Lighthouse's
default, a mid-range phone on slow 4G with a 4x slower CPU, simulated; desktop: --preset=desktop),
--runs Lighthouse runs per build (then a median line per page, mode and build: Lighthouse's
docs/variability.md recommends the median of 5); with --before the two builds alternate run by
run, so both see the same machine load. It prints one row per run: the performance score, FCP,
LCP, TBT, CLS, the bytes transferred (gzip, first visit, empty cache), the requests, the main
thread's time by category and its long tasks (what the score is made of, and less sensitive to
load than the score), console errors, Lighthouse's benchmarkIndex of this machine and the load
average (`/proc/loadavg`) when the run started. On a loaded machine (load above the number of
CPUs, or a benchmarkIndex well under ~1000) the timings, and so the scores, are pessimistic:
compare builds measured in one interleaved run, and read the bytes and task counts.

Chromium: /usr/bin/chromium (Debian's; CHROME_PATH overrides). The JSON reports are kept in
--out (default _build/lighthouse).
"""

from __future__ import annotations

import argparse
import functools
import gzip
import http.server
import io
import json
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGES = ["book/01_toy_world", "book/10_the_loss", "book/17_beyond_the_clip", "book/glossary"]
CHROME_FLAGS = ("--headless=new --no-sandbox --disable-gpu --disable-background-networking "
                "--disable-component-update --disable-sync --no-first-run")
TEXT = (".html", ".css", ".js", ".json", ".svg", ".txt", ".xml", ".map")  # (fonts: as they are)


class GzipHandler(http.server.SimpleHTTPRequestHandler):
    """Static files as GitHub Pages serves them: text types gzipped when the client asks,
    `Cache-Control: max-age=600`."""

    def log_message(self, format, *args):  # noqa: A002 - the base class's signature
        pass

    def end_headers(self):
        self.send_header("Cache-Control", "max-age=600")
        super().end_headers()

    def send_head(self):
        path = self.translate_path(self.path)
        if (os.path.isfile(path) and path.endswith(TEXT)
                and "gzip" in self.headers.get("Accept-Encoding", "")):
            with open(path, "rb") as f:
                data = gzip.compress(f.read(), compresslevel=6, mtime=0)
            self.send_response(200)
            self.send_header("Content-Type", self.guess_type(path))
            self.send_header("Content-Encoding", "gzip")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            return io.BytesIO(data)
        return super().send_head()


def serve(directory: Path) -> tuple[http.server.ThreadingHTTPServer, str]:
    handler = functools.partial(GzipHandler, directory=str(directory))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/"


def lighthouse_cli(given: str | None) -> str:
    for candidate in (given, ROOT / "benchmarks" / "lighthouse" / "node_modules" / ".bin" /
                      "lighthouse", shutil.which("lighthouse")):
        if candidate and Path(candidate).is_file():
            return str(candidate)
    sys.exit("error: no Lighthouse: run `npm ci --prefix benchmarks/lighthouse` (or pass "
             "--lighthouse PATH)")


def run_lighthouse(cli: str, url: str, mode: str, out: Path) -> dict:
    cmd = [cli, url, "--quiet", f"--chrome-flags={CHROME_FLAGS}", "--output=json",
           f"--output-path={out}", "--only-categories=performance,best-practices"]
    if mode == "desktop":
        cmd.append("--preset=desktop")
    env = dict(os.environ, CHROME_PATH=os.environ.get("CHROME_PATH", "/usr/bin/chromium"))
    subprocess.run(cmd, env=env, check=True, capture_output=True, timeout=600)
    return json.loads(out.read_text(encoding="utf-8"))


def summarize(report: dict) -> dict:
    """The figures of one Lighthouse report that the table shows."""
    audits = report["audits"]

    def num(audit: str) -> float:
        return audits[audit].get("numericValue") or 0.0

    def items(audit: str) -> list:
        return (audits.get(audit, {}).get("details") or {}).get("items") or []

    groups = {i["group"]: i["duration"] for i in items("mainthread-work-breakdown")}
    diag = (items("diagnostics") or [{}])[0]
    shifts = [(i.get("node", {}).get("selector", "?"), i.get("score", 0))
              for i in items("layout-shifts")]
    perf = report["categories"]["performance"]["score"]
    return {
        "perf": round(100 * perf) if perf is not None else None,
        "fcp": num("first-contentful-paint"), "lcp": num("largest-contentful-paint"),
        "tbt": num("total-blocking-time"), "cls": num("cumulative-layout-shift"),
        "si": num("speed-index"),
        "bytes": num("total-byte-weight"), "requests": len(items("network-requests")),
        "long_tasks": diag.get("numTasksOver50ms"), "main_ms": num("mainthread-work-breakdown"),
        "script": groups.get("scriptEvaluation", 0) + groups.get("scriptParseCompile", 0),
        "style": groups.get("styleLayout", 0), "render": groups.get("paintCompositeRender", 0),
        "parse": groups.get("parseHTML", 0),
        "console_errors": len(items("errors-in-console")),
        "benchmark": report.get("environment", {}).get("benchmarkIndex"),
        "shifts": shifts,
    }


HEADER = ("| build | page | mode | perf | FCP s | LCP s | TBT ms | CLS | KiB gz | req | "
          "main ms (script/style+layout/paint/parse) | tasks>50ms | console err | bench | load |")


def row(build: str, page: str, mode: str, s: dict, load: str) -> str:
    return (f"| {build} | {page.rsplit('/', 1)[-1]} | {mode} | {s['perf']} | "
            f"{s['fcp'] / 1000:.1f} | {s['lcp'] / 1000:.1f} | {s['tbt']:.0f} | {s['cls']:.3f} | "
            f"{s['bytes'] / 1024:.0f} | {s['requests']} | {s['main_ms']:.0f} ({s['script']:.0f}/"
            f"{s['style']:.0f}/{s['render']:.0f}/{s['parse']:.0f}) | {s['long_tasks']} | "
            f"{s['console_errors']} | {s['benchmark']:.0f} | {load} |")


def medians(results: list[tuple[str, str, str, dict]]) -> list[str]:
    """With several runs of a page: the median performance score and TBT, and the range, per
    build, page and mode (Lighthouse's docs/variability.md: the median of 5 runs is about twice
    as stable as one run)."""
    runs: dict[tuple[str, str, str], list[dict]] = {}
    for name, page, mode, s in results:
        runs.setdefault((name, page, mode), []).append(s)
    lines = []
    for (name, page, mode), ss in runs.items():
        perf = [s["perf"] for s in ss if s["perf"] is not None]
        if len(ss) < 2 or not perf:
            continue
        lines.append(f"median of {len(perf)}: {name} {page.rsplit('/', 1)[-1]} {mode}: perf "
                     f"{statistics.median(perf):g} (range {min(perf)}-{max(perf)}), TBT "
                     f"{statistics.median(s['tbt'] for s in ss):.0f} ms")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", type=Path, default=ROOT / "_build" / "html",
                        help="the built site to measure (default _build/html)")
    parser.add_argument("--before", type=Path,
                        help="another built site, measured interleaved with --build")
    parser.add_argument("--pages", nargs="+", default=PAGES)
    parser.add_argument("--modes", nargs="+", default=["mobile", "desktop"],
                        choices=["mobile", "desktop"])
    parser.add_argument("--runs", type=int, default=1, help="runs per page, mode and build")
    parser.add_argument("--out", type=Path, default=ROOT / "_build" / "lighthouse",
                        help="where the JSON reports go")
    parser.add_argument("--lighthouse", help="the Lighthouse CLI (default: "
                        "benchmarks/lighthouse/node_modules/.bin/lighthouse)")
    args = parser.parse_args(argv)
    cli = lighthouse_cli(args.lighthouse)
    builds = {"after" if args.before else "build": args.build.resolve()}
    if args.before:
        builds = {"before": args.before.resolve(), **builds}
    for path in builds.values():
        if not (path / "index.html").is_file():
            sys.exit(f"error: no built site at {path} (index.html missing)")
    servers = {name: serve(path) for name, path in builds.items()}
    args.out.mkdir(parents=True, exist_ok=True)
    version = subprocess.run([cli, "--version"], capture_output=True, text=True).stdout.strip()
    print(f"Lighthouse {version}, {os.cpu_count()} CPUs; builds: "
          + ", ".join(f"{n} = {p}" for n, p in builds.items()))
    print(HEADER)
    print("|" + "---|" * HEADER.count(" | ") + "---|")
    results = []
    try:
        for page in args.pages:
            for mode in args.modes:
                for run in range(args.runs):
                    for name, (_server, base) in servers.items():
                        load = " ".join(Path("/proc/loadavg").read_text().split()[:3])
                        out = args.out / f"{name}-{page.rsplit('/', 1)[-1]}-{mode}-{run}.json"
                        t0 = time.perf_counter()
                        try:
                            s = summarize(run_lighthouse(cli, f"{base}{page}.html", mode, out))
                        except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
                            print(f"| {name} | {page} | {mode} | FAILED: {exc} |", flush=True)
                            continue
                        s["seconds"] = time.perf_counter() - t0
                        results.append((name, page, mode, s))
                        print(row(name, page, mode, s, load), flush=True)
    finally:
        for server, _base in servers.values():
            server.shutdown()
    for line in medians(results):
        print(line)
    shifts = [(n, p, m, s["shifts"]) for n, p, m, s in results if s["cls"] >= 0.05]
    for name, page, mode, items in shifts:
        print(f"layout shifts, {name} {page} {mode}: "
              + "; ".join(f"{sel} ({score:.3f})" for sel, score in items[:5]))
    return 0 if results else 1


if __name__ == "__main__":
    sys.exit(main())
