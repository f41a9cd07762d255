"""How a benchmark run is shown: a table per scenario (each figure per operator and the pko/Go ratio), one headline
line per scenario (`fleet: pko/go = 0.42`), the figures as JSON and, with matplotlib, a chart per scenario.

Why apart from the scenarios: the same results are printed, written and drawn, and the smoke test checks them
without a terminal.
"""

from __future__ import annotations

import json
import math
import os
import platform
from pathlib import Path
from typing import Any

#: scenario → operator → figure → value
Results = dict[str, dict[str, dict[str, float]]]


def ratio(results: Results, scenario: str, figure: str) -> float | None:
    """pko's figure over the Go operator's (None when either is missing or the Go figure is 0)."""
    mine = results.get(scenario, {}).get("pko", {}).get(figure)
    theirs = results.get(scenario, {}).get("go", {}).get(figure)
    if mine is None or theirs is None or theirs == 0 or math.isnan(theirs) or math.isnan(mine):
        return None
    return mine / theirs


def _cell(value: float | None) -> str:
    if value is None or math.isnan(value):
        return "—"
    return f"{value:.3g}" if abs(value) < 1000 else f"{value:.0f}"


def table(results: Results, scenario: str) -> str:
    """The figures of one scenario, one row each, with the ratio when both operators ran."""
    by_operator = results.get(scenario, {})
    operators = list(by_operator)
    figures: list[str] = []
    for values in by_operator.values():
        figures += [name for name in values if name not in figures]
    width = max([len(f) for f in figures] + [10])
    header = f"  {'':<{width}}" + "".join(f"{op:>10}" for op in operators)
    both = {"pko", "go"} <= set(operators)
    if both:
        header += f"{'pko/go':>10}"
    rows = [header]
    for name in figures:
        row = f"  {name:<{width}}" + "".join(f"{_cell(by_operator[op].get(name)):>10}" for op in operators)
        if both:
            row += f"{_cell(ratio(results, scenario, name)):>10}"
        rows.append(row)
    return "\n".join(rows)


def headline(results: Results, scenario: str, figure: str) -> str:
    """`<scenario>: pko/go = <ratio>` of its headline figure ("n/a" when only one operator ran)."""
    value = ratio(results, scenario, figure)
    return f"{scenario}: pko/go = {value:.2f}" if value is not None else f"{scenario}: pko/go = n/a"


def machine() -> dict[str, Any]:
    memory = 0
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                memory = int(line.split()[1]) * 1024
    except OSError:
        pass
    return {"cpus": os.cpu_count(), "memory_gb": round(memory / 2**30, 1), "kernel": platform.release(),
            "python": platform.python_version()}


def write_json(path: Path, results: Results, headlines: dict[str, str], options: dict[str, Any]) -> None:
    ratios = {name: ratio(results, name, figure) for name, figure in headlines.items()}
    path.write_text(json.dumps({"machine": machine(), "options": options, "results": results,
                                "headline_figures": headlines, "ratios": ratios}, indent=2, ensure_ascii=False))


def plot(directory: Path, results: Results) -> list[Path]:
    """One PNG per scenario: each figure as a pair of bars (pko, Go). Needs matplotlib (the `dev` extra)."""
    import matplotlib  # only --plot needs it

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for scenario, by_operator in results.items():
        figures = [name for name in next(iter(by_operator.values()), {})]
        if not figures:
            continue
        columns = min(4, len(figures))
        rows = math.ceil(len(figures) / columns)
        fig, axes = plt.subplots(rows, columns, figsize=(2.6 * columns, 2.4 * rows), squeeze=False)
        cells = [axis for row in axes for axis in row]
        for axis in cells[len(figures):]:
            axis.set_visible(False)
        for axis, name in zip(cells, figures, strict=False):
            operators = list(by_operator)
            values = [by_operator[op].get(name, float("nan")) for op in operators]
            axis.bar(operators, values, color=["#4c72b0" if op == "pko" else "#999999" for op in operators])
            axis.set_title(name, fontsize=8)
            axis.tick_params(labelsize=8)
        fig.suptitle(scenario)
        fig.tight_layout()
        target = directory / f"{scenario}.png"
        fig.savefig(target, dpi=90)
        plt.close(fig)
        written.append(target)
    return written
