"""Git identity of the repository a run comes from: its revision and whether its tree is dirty.

What is modelled: ``git rev-parse HEAD`` (``unborn`` before the first commit) and ``git status
--porcelain`` (dirty = any line). What is deliberately not modelled: which files differ (the run's
reproduction copy records the command; ``runners.orchestration.rundir``).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from results_schema.records.manifest import GitIdentity
from runners.identity.pin_checks import IdentityError
from runners.paths import REPO_ROOT


def git_identity(repo: Path = REPO_ROOT) -> GitIdentity:
    """Revision and dirty flag of ``repo`` (``unborn`` before the first commit).

    Raises:
        IdentityError: ``git status`` fails (not a repository, git missing), naming the repository and git's error.
    """
    rev = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True, check=False)
    revision = rev.stdout.strip() if rev.returncode == 0 else "unborn"
    st = subprocess.run(["git", "-C", str(repo), "status", "--porcelain"], capture_output=True, text=True,
                        check=False)
    if st.returncode != 0:
        raise IdentityError(f"git status failed in {repo}: {st.stderr.strip()}")
    return GitIdentity(revision=revision, dirty=bool(st.stdout.strip()))
