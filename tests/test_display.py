"""The console's results table: the summary metrics, then each GPU's peak memory in GPU order."""
from __future__ import annotations

from rich.console import Console

from orchestrator.display import results_table


def test_results_table_lists_per_gpu_memory_in_gpu_order():
    metrics = {"tau": 2.5, "peak_mem_gb": 6.0, "peak_mem_gb_gpu10": 0.5, "peak_mem_gb_gpu1": 2.0,
               "peak_mem_gb_gpu0": 3.5, "unlisted_metric": 1.0}
    console = Console(width=80, record=True)
    console.print(results_table(metrics, "run"))
    rows = [line.split("│")[1].strip() for line in console.export_text().splitlines() if line.count("│") == 3]
    assert rows == ["tau", "peak_mem_gb", "peak_mem_gb_gpu0", "peak_mem_gb_gpu1", "peak_mem_gb_gpu10"]
