"""How long writing a run's report takes, and how much of it the charts are.

Every run writes its report at its end, so this is paid once a run (and ~150 times by
the test suite). Prints, for the finished run in OUTPUT:

- the write in a fresh Python (imports included), as a run's end pays it;
- the write again in this process once pyarrow and pandas are imported;
- the charts' share of that: drawing every chart of the page, over the whole write.

Usage:
    python bench/report_write.py OUTPUT [--repeat 3]
"""

from __future__ import annotations

import argparse
import importlib
import subprocess
import sys
import tempfile
import time
from pathlib import Path

FRESH = ("import time; t = time.perf_counter(); "
         "from toolkit.run.output.report import write_report; "
         "write_report({output!r}, {destination!r}); print(time.perf_counter() - t)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("output", help="a finished run's directory")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    destination = str(Path(tempfile.mkdtemp()) / "report.html")

    fresh = [float(subprocess.run(
        [sys.executable, "-c", FRESH.format(output=args.output, destination=destination)],
        capture_output=True, text=True, check=True).stdout.strip())
        for _ in range(args.repeat)]

    for module in ("pyarrow.dataset", "pandas"):  # as a run's process has them already
        importlib.import_module(module)

    from toolkit.run.output.report import write_report
    from toolkit.run.output.report.charts import column_chart, throughput_chart
    from toolkit.run.output.report.report_data import gather_report_data
    from toolkit.run.output.run_directory import RunDirectory

    write_report(args.output, destination)  # the template's first compile
    warm, charts = [], []
    data = gather_report_data(RunDirectory(args.output))
    for _ in range(args.repeat):
        start = time.perf_counter()
        write_report(args.output, destination)
        warm.append(time.perf_counter() - start)
        start = time.perf_counter()
        for column in data.columns:
            column_chart(column)
        throughput_chart(data.writes)
        charts.append(time.perf_counter() - start)

    print(f"fresh process: {', '.join(f'{t:.2f}' for t in fresh)} s")
    print(f"in process:    {', '.join(f'{t:.3f}' for t in warm)} s")
    print(f"charts:        {min(charts) * 1000:.1f} ms, "
          f"{min(charts) / min(warm):.1%} of the in-process write")


if __name__ == "__main__":
    main()
