"""ACEBench agent metrics.

End-to-end accuracy: 1.0 iff, for every class in the answer's final state, our serialised state equals
it (dicts compared key by key, lists in order, numbers by value so 412 == 412.0); else 0.0.

Process accuracy. ACEBench reports it as the share m/n of the n milestone calls of an ideal path that
the agent's call process matches in order; we make that precise as

    process = max over milestone alternatives A of  LCS(A, executed) / |A|

where |A| counts the calls of A, `executed` is the agent's successfully executed calls in order
(a call that failed validation or that the API refused is not counted), and two calls match iff their
names and their arguments are equal once arguments equal to their documented default are dropped.
Calls listed inside one bracket of a milestone string form a group that may be made in any order:
the LCS is maximised over the orders within each group. No milestones at all gives 1.0.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

from lopd.core.multiturn import ToolCall


def process_accuracy(alternatives: Sequence[Sequence[Sequence[ToolCall]]], executed: Sequence[ToolCall]) -> float:
    best = None
    for alternative in alternatives:
        n = sum(len(group) for group in alternative)
        if n == 0:
            return 1.0
        for order in itertools.product(*(itertools.permutations(group) for group in alternative)):
            flat = [call for group in order for call in group]
            score = longest_common_subsequence(flat, executed) / n
            best = score if best is None else max(best, score)
    return 1.0 if best is None else best


def longest_common_subsequence(a: Sequence[Any], b: Sequence[Any]) -> int:
    previous = [0] * (len(b) + 1)
    for x in a:
        current = [0]
        for j, y in enumerate(b):
            current.append(previous[j] + 1 if x == y else max(previous[j + 1], current[j]))
        previous = current
    return previous[-1]
