"""A sync fit's round records as they were when the fit removed them (they are a work folder of the fit)."""

from __future__ import annotations

import node.driver._fit


def rounds_when_removed(monkeypatch, run: str) -> dict[str, list[dict[str, list[str]]]]:
    """Filled, when the fit of ``run`` removes its work folders, with its sync jobs' round folders as they were:
    ``{phase: [{attempt: names in its folder}, one per job]}``."""
    found: dict[str, list[dict[str, list[str]]]] = {}
    remove = node.driver._fit.remove_work_folders

    def look_then_remove(store, run_id, fit_id=None):
        if run_id == run and fit_id is not None:
            for phase in store.list(f"runs/{run}/rounds/{fit_id[:12]}"):
                folder = f"runs/{run}/rounds/{fit_id[:12]}/{phase}"
                found[phase] = [{attempt: store.list(f"{folder}/{job}/{attempt}")
                                 for attempt in store.list(f"{folder}/{job}")} for job in store.list(folder)]
        remove(store, run_id, fit_id)

    monkeypatch.setattr(node.driver._fit, "remove_work_folders", look_then_remove)
    return found
