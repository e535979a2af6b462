"""Schemathesis hooks for tests/robust/test_api_fuzz.py (loaded through SCHEMATHESIS_HOOKS)."""

from __future__ import annotations

import os
from collections import Counter
from typing import Any

import schemathesis
from schemathesis import Case, HookContext
from schemathesis.generation.meta import CoveragePhaseData

# The coverage phase's deterministic cases (~2,050, most of the fuzzer's time) are sampled unless KB_FUZZ_FULL=1:
# of each kind of case (operation, scenario, parameter) the first and then every COVERAGE_SAMPLE-th is sent.
COVERAGE_SAMPLE = 4
_seen: Counter[tuple[str, ...]] = Counter()


def _in_coverage_sample(case: Case[Any]) -> bool:
    """Every kind of coverage case is sent, a quarter of each kind's cases: the same ones every run, as the phase
    generates the same cases in the same order every run. The other phases are not sampled."""
    meta = case.meta
    if os.environ.get("KB_FUZZ_FULL") == "1" or meta is None or not isinstance(meta.phase.data, CoveragePhaseData):
        return True
    data = meta.phase.data
    kind = (case.operation.method.upper(), case.operation.path, str(data.scenario), str(data.parameter_location),
            str(data.parameter))
    _seen[kind] += 1
    return _seen[kind] % COVERAGE_SAMPLE == 1


@schemathesis.hook
def filter_case(context: HookContext, case: Case[Any]) -> bool:
    """Twisted, under Daphne, parses a multipart body before the app is called and answers one
    without any part with a bare 400 (no body, no content type): not ours to shape. Every other
    request, valid or not, is sent (of the coverage phase's, the sample above)."""
    if (case.operation.method.upper(), case.operation.path) == ("POST", "/api/documents"):
        body = case.body
        if isinstance(body, dict) and all(value in (None, [], {}) for value in body.values()):
            return False
    return _in_coverage_sample(case)
