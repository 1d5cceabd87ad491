"""The accuracy identity rule: how an accuracy phase's offload cases are judged against its baseline runs.

One rule for the runner's live check (``runners.orchestration.execute.accuracy_output_check``, over the
baseline runs of the phase finished so far) and the verifier (``analysis.accuracy.baselines.agreement`` and
``analysis.accuracy.verifier``, over all of them), per task, from each run's ``examples_sha256`` (the digest of
its examples file: outputs, parsed answers, prompts; nothing case-specific):

* one baseline run: ``single_baseline``; its determinism on the runtime is not checked;
* every baseline run has the same digest: ``identity``: a case's examples must equal the first baseline
  run's (greedy decoding);
* the baseline runs differ: ``noise_floor``: the runtime is not deterministic, so a case is judged against the
  baseline-vs-baseline floor, paired per example (the verifier's ``check_vs_floor``), not by identity.

Under ``single_baseline`` and ``identity`` the case is compared with the first baseline run.

``MAX_ACCURACY_DROP``: where the verifier's drop tolerance has a meaning (the config's
``MatrixConfig.max_accuracy_drop`` through ``conf.ranges`` and ``analysis.accuracy.verifier``'s argument alike).
"""

from __future__ import annotations

from collections.abc import Sequence

from results_schema.records.accuracy_types import BaselineJudgement
from results_schema.rules.number_rule import NumberRange

MAX_ACCURACY_DROP = NumberRange(high=1, unit="fraction of accuracy")
"""The drop tolerance of the accuracy verifier: a fraction of accuracy in [0, 1] (0 = no drop allowed, 0.01 = 1
percentage point)."""



def baseline_judgement(baseline_shas: Sequence[str]) -> BaselineJudgement:
    """How a task's offload cases are judged, from its baseline runs' ``examples_sha256`` in repeat order.

    Raises:
        ValueError: no baseline run.
    """
    if not baseline_shas:
        raise ValueError("baseline_judgement needs at least one baseline run's examples_sha256")
    if len(baseline_shas) == 1:
        return "single_baseline"
    return "identity" if len(set(baseline_shas)) == 1 else "noise_floor"
