"""The run plan: what one run checks and how, resolved once from a front end's arguments.

pytest resolves its command line once into a ``Config`` that every hook reads; a gdn-equiv run does the same.
Each front end has one function that turns its arguments into a :class:`RunPlan` (the pytest plugin's
:func:`gdn_equiv.plugin.options.plan_of`; ``check``/``fuzz``'s :func:`gdn_equiv.run.cli.check.plan_run`), and
both use the checks below, so the same bad value is refused with the same words (the front end names its own
flag before them: ``--gdn-backend: ...`` / ``--backend 'x': ...``). Below the plan, code takes the plan's objects
(backends as :class:`~gdn_equiv.model.backends.Backend`, the profile by name) instead of looking names up again
or reading Hypothesis' global settings back.

Every check raises :class:`~gdn_equiv.errors.InvalidArgument` for a value that is wrong anywhere; whether a value
that is right can run on this machine is asked separately (``unavailable``-style functions returning why not),
since the front ends answer the two differently (usage error 2 / environment 3).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from gdn_equiv.errors import InvalidArgument
from gdn_equiv.harness import testing
from gdn_equiv.model.backends import Backend, get_backend, off_device
from gdn_equiv.serving.records import engine_paths, not_applicable

DATABASE_SUFFIX = testing.DATABASE_SUFFIX


@dataclass(frozen=True)
class RunPlan:
    """One run's resolved options; nothing in it is a name still to be looked up (a backend is its object)."""

    backends: tuple[Backend, ...]
    targets: tuple[str, ...]
    families: tuple[str, ...]
    #: engine name asked -> its paths (``--gdn-serving-engine``/``--serving-engine``); empty: none was named
    engines: Mapping[str, tuple[str, ...]]
    #: the serving engine paths the serving properties run on
    serving_engines: tuple[str, ...]
    profile: str  # a name of :data:`gdn_equiv.harness.testing.PROFILES`, never with the database suffix
    database: str | None  # a directory or a redis URL; None: Hypothesis' default
    isolate: bool
    example_timeout: float | None  # seconds an isolated example may run (None: not isolated)
    sanitize: str | None  # compute-sanitizer tool each example's kernel calls run under
    device: str  # "cuda" or "cpu" (or cuda:N)
    shrink_seconds: float | None  # None: Hypothesis' own bound (the command line's runs)
    html: Path | None = None
    fla_core: str = "fla"
    split_families: bool = False
    allow_missed_fusion: bool = False

    @property
    def backend_names(self) -> tuple[str, ...]:
        return tuple(b.name for b in self.backends)

    def backend(self, name: str) -> Backend:
        """The plan's backend called ``name`` (a test parametrised by the plan's names gets its object back)."""
        for backend in self.backends:
            if backend.name == name:
                return backend
        raise InvalidArgument(f"backend {name!r} is not in this run's plan ({', '.join(self.backend_names)})")

    @property
    def hypothesis_profile(self) -> str:
        """The name the plan's settings are registered under in Hypothesis (:func:`load_settings`)."""
        return self.profile if self.database is None else self.profile + DATABASE_SUFFIX


# ---- the checks both front ends share -----------------------------------------------------------------


def names(option: str | None, default: str) -> list[str]:
    """A comma list (``None``: ``default``), order kept, no repeats."""
    return testing.parse_names(default if option is None else option)


def backends(option: Sequence[str]) -> tuple[Backend, ...]:
    """Each name (registered, an entry point, or a ``module:attr`` plug-in) loaded and checked against SPEC
    §3's signatures; :class:`InvalidArgument` (the registry's words) for one that does not load."""
    return tuple(get_backend(name) for name in dict.fromkeys(option))


def backends_unavailable(plan_backends: Sequence[Backend], device: str | None = None) -> dict[str, str]:
    """Each backend that cannot run on this machine, with why: its own ``unavailable()``, or, for a run on
    ``device``, a declaration of other devices only (:func:`~gdn_equiv.model.backends.off_device`)."""
    reasons = {b.name: b.unavailable() or (off_device(b, device) if device else None) for b in plan_backends}
    return {name: reason for name, reason in reasons.items() if reason is not None}


def profile(given: str | None, default: str, env: Mapping[str, str] = os.environ) -> str:
    """The run's profile: ``given`` (a front end's option), else ``HYPOTHESIS_PROFILE``, else ``default``; a
    ``HYPOTHESIS_PROFILE`` that names no profile is refused whichever wins (the same words everywhere)."""
    value = env.get("HYPOTHESIS_PROFILE")
    if value and value not in testing.PROFILES:
        raise InvalidArgument(
            f"HYPOTHESIS_PROFILE={value!r} is not a profile; known profiles: {', '.join(sorted(testing.PROFILES))}"
        )
    name = given or value or default
    if name not in testing.PROFILES:
        raise InvalidArgument(
            f"profile {name!r} is not a profile; known profiles: {', '.join(sorted(testing.PROFILES))}"
        )
    return name


def pytest_default_profile(env: Mapping[str, str] = os.environ) -> str:
    """The gate's default: ``ci`` under ``CI=true``, else ``dev`` (``check`` defaults to ci, ``fuzz`` to fuzz)."""
    return "ci" if env.get("CI", "").strip().lower() in ("1", "true", "yes") else "dev"


def shrink_seconds(given: float | None, profile_name: str) -> float:
    """``given``, else the profile's bound (:data:`gdn_equiv.harness.testing.SHRINK_SECONDS`); must be > 0."""
    seconds = testing.SHRINK_SECONDS.get(profile_name, 300.0) if given is None else given
    if not seconds > 0:
        raise InvalidArgument(f"the shrink bound must be > 0 seconds, got {seconds!r}")
    return seconds


def engines(option: Sequence[str]) -> dict[str, tuple[str, ...]]:
    """Each serving engine name with its paths; :class:`InvalidArgument` naming the known ones otherwise."""
    asked: dict[str, tuple[str, ...]] = {}
    for name in dict.fromkeys(option):
        try:
            asked[name] = tuple(engine_paths(name))
        except KeyError as exc:
            raise InvalidArgument(str(exc.args[0])) from None
    return asked


def engine_unavailable(paths: Sequence[str]) -> str | None:
    """Why none of an engine's ``paths`` can run here (each path's reason where it has several), or ``None``
    when one can: an engine is asked when one of its paths runs; the others' rows say why they cannot."""
    reasons = {p: not_applicable(p) for p in paths}
    if not all(reasons.values()):
        return None
    return "; ".join(f"{p}: {r}" for p, r in reasons.items()) if len(paths) > 1 else str(reasons[paths[0]])


# ---- what a plan sets in the process ------------------------------------------------------------------


def load_settings(plan: RunPlan) -> str | None:
    """The gate's settings for the whole process: register the profiles, load the plan's (with its database,
    when it names one) and bound shrinking to the plan's seconds; returns why the bound could not be applied,
    or ``None``. Hypothesis keeps the loaded profile as its default settings, which every test's own
    ``settings(...)`` inherits."""
    from hypothesis import settings

    testing.register_profiles()
    if plan.database is not None:
        settings.register_profile(
            plan.hypothesis_profile,
            parent=settings.get_profile(plan.profile),
            database=testing.open_database(plan.database),
        )
    settings.load_profile(plan.hypothesis_profile)
    return None if plan.shrink_seconds is None else testing.bound_shrinking(plan.shrink_seconds)


@contextmanager
def profile_loaded(name: str | None) -> Iterator[None]:
    """A command's settings for its run, put back after it: the profile ``name`` loaded (strategies read it,
    e.g. fuzz's ``target()``); the command passes its database to each search itself."""
    if name is None:
        yield
        return
    from hypothesis import settings

    testing.register_profiles()
    previous = settings.get_current_profile_name()
    settings.load_profile(name)
    try:
        yield
    finally:
        settings.load_profile(previous)
