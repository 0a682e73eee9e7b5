"""genobs' benchmark terms and each tool's name for them, so a figure can be found in the tool's
own console and export. genobs uses the terms of its domain notes: TTFT; TPOT, the decode time of
one request per output token after the first ((e2e - TTFT) / (output tokens - 1)); ITL, each gap
between two streamed chunks; e2e; per-user and system throughput. genobs.gates.bench_report
prints the lines of the tools a report holds below its table; docs/gates.md (benchmark) has
the same table."""

from __future__ import annotations

from genobs.gates.runs import TITLES

TOOLS = {"aiperf": "AIPerf", "guidellm": "GuideLLM", "vllm": "vllm bench serve"}

# family -> canonical metric -> the tool's console name (export key) of each figure its parser reads;
# a figure genobs derives says how in its own note instead
NAMES: dict[str, dict[str, str]] = {
    "aiperf": {
        "ttft": '"Time to First Token" (time_to_first_token)',
        "tpot": '"Inter Token Latency" (inter_token_latency)',
        "itl": "inter_chunk_latency (export only)",
        "e2e": '"Request Latency" (request_latency)',
        "output_tps_per_user": '"Output Token Throughput Per User" (output_token_throughput_per_user)',
        "e2e_output_tps_per_user": '"E2E Output Token Throughput" (e2e_output_token_throughput)',
        "prefill_tps_per_user": "prefill_throughput_per_user",
        "output_tps": '"Output Token Throughput" (output_token_throughput)',
        "input_tps": '"Input Token Throughput" (input_token_throughput)',
        "total_tps": "total_token_throughput",
        "request_throughput": '"Request Throughput" (request_throughput)',
        "goodput": "goodput",
    },
    "guidellm": {
        "ttft": '"TTFT" (time_to_first_token_ms)',
        "tpot": '"ITL" (inter_token_latency_ms)',
        "e2e": '"Request Latency" (request_latency)',
        "output_tps": '"Output Tokens Per Sec" (output_tokens_per_second)',
        "input_tps": '"Input Tokens Per Sec" (prompt_tokens_per_second)',
        "total_tps": '"Total Tokens Per Sec" (tokens_per_second)',
        "request_throughput": '"Requests Per Sec" (requests_per_second)',
    },
    "vllm": {
        "ttft": '"TTFT" (*_ttft_ms)',
        "tpot": '"TPOT" (*_tpot_ms)',
        "itl": '"ITL" (*_itl_ms)',
        "e2e": '"E2EL" (*_e2el_ms)',
        "output_tps": '"Output token throughput" (output_throughput)',
        "total_tps": '"Total token throughput" (total_token_throughput)',
        "request_throughput": '"Request throughput" (request_throughput)',
        "goodput": '"Request goodput" (request_goodput)',
    },
}

# what a tool prints under a name genobs uses for something else, and genobs does not read
NOT_READ = {
    "guidellm": 'its "TPOT" (time_per_output_token_ms) is request latency / output tokens, TTFT included: not read',
}


def footnote(family: str, metrics: set[str]) -> str:
    """One line: the tool's names for the terms of `metrics` (those its runs have)."""
    parts = [f"{TITLES[m]} = {name}" for m, name in NAMES.get(family, {}).items() if m in metrics]
    extra = f"; {NOT_READ[family]}" if family in NOT_READ else ""
    return f"{TOOLS.get(family, family)}: " + "; ".join(parts) + extra
