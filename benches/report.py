"""Turn a pytest-benchmark JSON file into the README's Markdown table.

Usage: python -m benches.report bench-results/latest.json

Each group's rows are ordered fastest first; `× tito_fast` is how many
times longer a row's median takes than the fastest tito_fast row of its
group (above 1: tito_fast is faster). Memory columns come from extra_info.
"""

from __future__ import annotations

import json
import platform
import sys
from pathlib import Path
from typing import Any


def _fmt_time(seconds: float) -> str:
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds / 1e-9:.3g} ns"


def _fmt_bytes(n: float) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n:.0f} B"


def _impl(bench: dict[str, Any]) -> str:
    return str(bench["params"].get("impl", bench["name"]))


def table(data: dict[str, Any]) -> str:
    groups: dict[str, list[dict[str, Any]]] = {}
    for b in data["benchmarks"]:
        groups.setdefault(b["group"], []).append(b)
    has_mem = any("bytes" in b.get("extra_info", {}) for b in data["benchmarks"])
    head = "| group | implementation | median | × tito_fast |" + (" memory |" if has_mem else "")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for group, benches in groups.items():
        tito = [b["stats"]["median"] for b in benches if _impl(b).startswith("tito_fast")]
        base = min(tito) if tito else None
        for b in sorted(benches, key=lambda b: b["stats"]["median"]):
            med = b["stats"]["median"]
            ratio = f"{med / base:.1f}×" if base else "–"
            row = f"| {group} | {_impl(b)} | {_fmt_time(med)} | {ratio} |"
            if has_mem:
                info = b.get("extra_info", {})
                row += f" {_fmt_bytes(info['bytes'])} |" if "bytes" in info else " |"
            lines.append(row)
    return "\n".join(lines)


def headlines(data: dict[str, Any]) -> str:
    """One line per group: how tito_fast compares with each baseline."""
    groups: dict[str, dict[str, float]] = {}
    extra: dict[str, dict[str, Any]] = {}
    for b in data["benchmarks"]:
        groups.setdefault(b["group"], {})[_impl(b)] = b["stats"]["median"]
        extra.setdefault(b["group"], {})[_impl(b)] = b.get("extra_info", {})
    lines = []
    for group, med in groups.items():
        tito = {k: v for k, v in med.items() if k.startswith("tito_fast")}
        if not tito:
            continue
        best_name, best = min(tito.items(), key=lambda kv: kv[1])
        parts = [f"{other} / {best_name} = {v / best:.1f}×" for other, v in med.items() if not other.startswith("tito_fast")]
        if "tito_fast_arrays" in med and "tito_fast" in med and "python" in med:
            parts.append(f"python / tito_fast (lists) = {med['python'] / med['tito_fast']:.1f}×")
        if "tito_fast_tokenizer_encode" in med and "python" in med:
            parts.append(f"python / tito_fast_tokenizer_encode = {med['python'] / med['tito_fast_tokenizer_encode']:.1f}×")
        if "tito_fast_list" in med and "python" in med:
            parts.append(f"python / tito_fast_list = {med['python'] / med['tito_fast_list']:.1f}×")
        if "tito_fast_1_thread" in med and "python" in med:
            parts.append(f"python / tito_fast_1_thread = {med['python'] / med['tito_fast_1_thread']:.1f}×")
            if "miles_tito_tokenizers" in med:
                parts.append(f"miles_tito_tokenizers / tito_fast_1_thread = {med['miles_tito_tokenizers'] / med['tito_fast_1_thread']:.1f}×")
            if "tito_fast_2_threads" in med:
                parts.append(f"1 thread / 2 threads = {med['tito_fast_1_thread'] / med['tito_fast_2_threads']:.2f}×")
            n = extra[group]["tito_fast_1_thread"].get("sessions")
            if n:
                per = ", ".join(f"{k} {v / n * 1e3:.1f} ms" for k, v in sorted(med.items(), key=lambda kv: kv[1]))
                parts.append(f"per session: {per}")
        if {"tito_fast_native", "tito_fast_jinja2", "transformers"} <= med.keys():
            nat = med["tito_fast_native"]
            parts.append(f"jinja2 / native = {med['tito_fast_jinja2'] / nat:.1f}×; transformers / native = {med['transformers'] / nat:.1f}×")
            batch = extra[group].get("tito_fast_native_batch_2_threads", {}).get("per_call")
            if batch and "tito_fast_native_batch_2_threads" in med:
                per = med["tito_fast_native_batch_2_threads"] / batch
                parts.append(f"native on 2 threads, per conversation: {per * 1e3:.2f} ms ({med['transformers'] / per:.0f}× transformers)")
        if "tito_fast_csr_1t" in med and "tito_fast_csr_2t" in med:
            parts.append(f"csr 1 thread / 2 threads = {med['tito_fast_csr_1t'] / med['tito_fast_csr_2t']:.2f}×")
        if "tito_fast_matching_1_thread" in med:
            if "python" in med:
                parts += [f"python / {k} = {med['python'] / med[k]:.1f}×" for k in ("tito_fast_arrow", "tito_fast") if k in med and k != best_name]
            ips = extra[group]["tito_fast_matching_1_thread"].get("prompt_ids_per_second")
            read = extra[group].get("numpy_read_1_thread", {}).get("prompt_ids_per_second")
            if ips:
                parts.append(f"matching on 1 thread: {ips / 1e6:.0f}M prompt ids/s")
                if read:
                    parts.append(f"numpy reads the same ids at {read / 1e6:.0f}M/s (matching = {ips / read:.2f}× that)")
            for k, info in extra[group].items():
                if "bytes" in info and info.get("ids_masks_logprobs_bytes"):
                    parts.append(f"{k} output memory / its ids, masks and logprobs = {info['bytes'] / info['ids_masks_logprobs_bytes']:.2f}×")
        mem = {k: v["bytes"] for k, v in extra[group].items() if "bytes" in v}
        if "tito_fast" in mem and "python" in mem:
            final = extra[group]["tito_fast"].get("final_uint32_bytes")
            parts.append(f"memory python / tito_fast = {mem['python'] / mem['tito_fast']:.0f}×")
            if final:
                parts.append(f"tito_fast memory / final ids as uint32 = {mem['tito_fast'] / final:.2f}×")
        lines.append(f"- {group}: " + "; ".join(parts))
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    data = json.loads(Path(argv[0]).read_text())
    mi = data.get("machine_info", {})
    print(
        f"Measured on {mi.get('cpu', {}).get('brand_raw', platform.processor() or '?')}, "
        f"{mi.get('cpu', {}).get('count', '?')} cores, Python {mi.get('python_version', '?')}, "
        f"{data.get('datetime', '')[:10]}.\n"
    )
    print(table(data))
    print("\nRatios (medians; above 1 means tito_fast is faster or smaller):\n")
    print(headlines(data))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
