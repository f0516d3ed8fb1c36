"""Speed of the Megatron launch-script word splitter (planner.launch.shell.words) on the largest
accepted file, 16 MiB, against the time its length allows (issue 51: a unit test used to assert
it and failed on a busy machine; speed is measured here instead).

    python benchmarks/launch_splitter.py [--repeats 3]

Three inputs: 4M short words, one 16 MiB word and one 15 MiB quoted word. The splitter scans in
time linear in the text (shlex builds a word one character at a time: quadratic), so each
takes a few seconds at most on one quiet core (3 s for the short words, 0.2 s for one word, in
issue 51's measurement); the table gives the median and the worst
wall time and the rate in MiB/s.
"""

from __future__ import annotations

import argparse

from timing import timed

from planner.launch.shell import words

INPUTS = {
    "4M short words": "--x " * (4 << 20),
    "one 16 MiB word": "y" * (16 << 20),
    "one 15 MiB quoted word": '"' + "a b" * (5 << 20) + '"',
}


def main() -> None:
    """Time each input and print a line per input."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="runs per input (default 3)")
    args = parser.parse_args()
    for name, text in INPUTS.items():
        _, median_s, worst_s = timed(args.repeats, words, text)
        rate_mib_s = len(text) / (1 << 20) / median_s
        print(f"{name:>24}: median {median_s:.2f} s, worst {worst_s:.2f} s, {rate_mib_s:.0f} MiB/s")


if __name__ == "__main__":
    main()
