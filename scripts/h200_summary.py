"""Fold the H200 measurements of scripts/h200_measure.sh into one summary.json and print the table.

python scripts/h200_summary.py results/h200"""

from __future__ import annotations

import json
import sys
from pathlib import Path

THROUGHPUT_TARGET = 3.8  # bundled output throughput over HF eager generate's, same GPU, same run


def main() -> None:
    out = Path(sys.argv[1])

    def load(name: str) -> dict:
        path = out / name
        return json.loads(path.read_text()) if path.is_file() else {}

    decode, agreement = load("decode_bs1.json"), load("agreement.json")
    bundled = load("throughput_bundled.json").get("metrics", {})
    hf = load("throughput_hf.json").get("metrics", {})
    summary: dict = {"command": "bash scripts/h200_measure.sh " + str(out)}
    rows = []
    if decode:
        mode = decode["best_mode"]
        tps = decode["tokens_per_s"][mode]
        target = max(225.0, decode["target_tokens_per_s"])
        summary["bs1_decode"] = {"tokens_per_s": tps, "mode": mode, "target": target, "met": tps >= target}
        rows.append((f"bs1 decode, best ({mode}) tok/s", f"{tps:.1f}", f">= {target:.0f}", tps >= target))
        for mode, value in decode["tokens_per_s"].items():
            rows.append((f"  {mode} (tok/s)", f"{value:.1f}", "", None))
        frac = tps * decode["roofline_ms_per_token"] / 1e3
        rows.append(("bs1 graph replay GPU ms", f"{decode['graph_replay_gpu_ms']:.2f}", "", None))
        rows.append(("bs1 decode / roofline", f"{frac:.3f}", ">= 0.85", frac >= 0.85))
    if bundled and hf:
        ratio = bundled["output_throughput"] / hf["output_throughput"]
        summary["throughput"] = {
            "bundled_output_tok_s": bundled["output_throughput"],
            "hf_output_tok_s": hf["output_throughput"],
            "ratio": ratio,
            "target": THROUGHPUT_TARGET,
            "met": ratio >= THROUGHPUT_TARGET,
        }
        rows.append(("throughput bundled (out tok/s)", f"{bundled['output_throughput']:.0f}", "", None))
        rows.append(("throughput hf (out tok/s)", f"{hf['output_throughput']:.0f}", "", None))
        rows.append(("bundled / hf", f"{ratio:.2f}", f">= {THROUGHPUT_TARGET}", ratio >= THROUGHPUT_TARGET))
    if agreement:
        summary["agreement"] = {
            k: agreement[k] for k in ("token_agreement", "identical_requests", "num_requests")
        }
        rows.append(("greedy token agreement triton/torch", f"{agreement['token_agreement']:.3f}", "", None))
        rows.append(
            ("identical requests", f"{agreement['identical_requests']}/{agreement['num_requests']}", "", None)
        )
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    for name, value, target, met in rows:
        verdict = "" if met is None else ("met" if met else "MISSED")
        print(f"{name:<38} {value:>10} {target:>9} {verdict}")


if __name__ == "__main__":
    main()
