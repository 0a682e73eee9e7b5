"""Peak memory and time of `genobs benchmark` on the largest exports it accepts: a
realistic 256 MiB `vllm bench serve --save-detailed` result (generated texts and
per-token ITLs), and the exports that cost most memory per byte within the caps
(short strings, small objects, floats). Each runs in a fresh process; peak RSS is
the child's ru_maxrss. Prints one line per export."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from genobs.gates.runs import MAX_BYTES, MAX_CONTAINERS, MAX_STRINGS, MAX_VALUES  # noqa: E402

HEAD = {
    "endpoint_type": "openai-chat", "model_id": "bench", "max_concurrency": 64, "duration": 600.0,
    "request_throughput": 10.0, "output_throughput": 2000.0, "total_token_throughput": 9000.0,
    "mean_ttft_ms": 200.0, "median_ttft_ms": 180.0, "p99_ttft_ms": 900.0,
    "mean_tpot_ms": 20.0, "median_tpot_ms": 19.0, "p99_tpot_ms": 40.0,
}  # fmt: skip


def detailed(path: Path, size: int) -> None:
    """Requests of 4,096 input and 512 output tokens, ITLs as vllm writes them, texts filling the rest."""
    per_request = 512 * 21 + 3000  # 511 ITLs of ~21 bytes, a ~3,000-byte text
    n = size // per_request
    itl = json.dumps([0.0193456789012345] * 511)
    text = json.dumps("lorem ipsum " * 250)
    with path.open("w") as fh:
        fh.write(json.dumps({**HEAD, "completed": n, "failed": 0, "total_input_tokens": 4096 * n})[:-1])
        fh.write(f', "total_output_tokens": {512 * n}, "input_lens": [{", ".join(["4096"] * n)}]')
        fh.write(f', "output_lens": [{", ".join(["512"] * n)}], "ttfts": [{", ".join(["0.2"] * n)}]')
        fh.write(', "itls": [' + ", ".join([itl] * n) + "]")
        fh.write(', "generated_texts": [' + ", ".join([text] * n) + "]}")


def strings(path: Path) -> None:
    path.write_text(json.dumps({**HEAD, "completed": 10, "errors": ["ab"] * (MAX_STRINGS - 200)}))


def objects(path: Path) -> None:
    path.write_text(json.dumps({**HEAD, "completed": 10, "errors": [{"a": 1}] * (MAX_CONTAINERS - 10)}))


def floats(path: Path) -> None:
    path.write_text(json.dumps({**HEAD, "completed": 10, "errors": [0.123456789] * (MAX_VALUES - 200)}))


def measure(path: Path, spec: Path) -> tuple[int, float, float, str]:
    code = (
        "import resource, subprocess, sys, time\n"
        "t = time.monotonic()\n"
        "r = subprocess.run([sys.executable, '-m', 'genobs', 'benchmark', sys.argv[1], '--spec', sys.argv[2]],"
        " capture_output=True, text=True)\n"
        "print(r.returncode, time.monotonic() - t, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024)\n"
        "print(r.stderr.strip()[-200:])"
    )
    out = subprocess.run([sys.executable, "-c", code, str(path), str(spec)], capture_output=True, text=True, cwd=REPO)
    first, _, err = out.stdout.partition("\n")
    rc, wall, peak = first.split()
    return int(rc), float(wall), float(peak), err.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--size-mib", type=int, default=MAX_BYTES // 2**20, help="size of the realistic export")
    args = parser.parse_args()
    spec = REPO / "specs" / "chat.yaml"
    with tempfile.TemporaryDirectory() as tmp:
        for name, write in (
            ("vllm --save-detailed", lambda p: detailed(p, args.size_mib * 2**20 - 2**20)),
            (f"{MAX_STRINGS:,} short strings", strings),
            (f"{MAX_CONTAINERS:,} small objects", objects),
            (f"{MAX_VALUES:,} floats", floats),
        ):
            path = Path(tmp) / "export.json"
            write(path)
            size = path.stat().st_size / 2**20
            rc, wall, peak, err = measure(path, spec)
            print(
                f"{name:28} {size:7.1f} MiB  exit {rc}  {wall:5.1f} s  peak RSS {peak:6.0f} MiB "
                f"({peak / size:.1f}x the file){'  ' + err if rc == 2 else ''}",
                flush=True,
            )
            path.unlink()


if __name__ == "__main__":
    main()
