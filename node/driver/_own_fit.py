"""A model's settings for its own one-process ``fit``, which a distributed fit does not read: said, not ignored.

The trainer's :class:`~node.driver._settings.TrainingSettings` say how long each phase trains and when it
stops (docs/training.md).  A model built with epochs or early stopping of its own (``DBN(finetune_epochs=50)``)
would otherwise train the settings' 5 epochs without a word: :func:`warn_own_fit_settings` warns, once per
setting, naming what the fit trains instead and the setting that would train what the model asked for.
"""

from __future__ import annotations

import inspect
import warnings
from typing import Any, Callable, Iterable, Mapping

#: Per model kind, the model's own epoch settings, each with the test of the phases it counts the epochs of.
OWN_EPOCHS: Mapping[str, Mapping[str, Callable[[str], bool]]] = {
    "dbn": {"pretrain_epochs": lambda phase: phase != "finetune",
            "finetune_epochs": lambda phase: phase == "finetune"},
    "rbm": {"n_iter": lambda phase: True},
    "convnet": {"epochs": lambda phase: True},
}


def given_settings(model: Any, names: Iterable[str]) -> dict[str, Any]:
    """Those of the model's constructor settings ``names`` whose values differ from its class's defaults (what its
    maker asked for)."""
    try:
        parameters = inspect.signature(type(model).__init__).parameters
    except (TypeError, ValueError):  # a constructor Python cannot read: nothing known to be asked for
        return {}
    given = {}
    for name in names:
        default = parameters[name].default if name in parameters else inspect.Parameter.empty
        if default is not inspect.Parameter.empty and hasattr(model, name) and getattr(model, name) != default:
            given[name] = getattr(model, name)
    return given


def warn_own_fit_settings(model: Any, kind: str | None, settings: Any, phases: list[str], *, stacklevel: int) -> None:
    """Warn (``UserWarning``) of each own-fit setting ``model`` was given that this fit trains otherwise."""
    given = given_settings(model, [*OWN_EPOCHS.get(str(kind), {}), "early_stopping"])
    for name, counts in OWN_EPOCHS.get(str(kind), {}).items():
        if name not in given:
            continue
        asked = int(given[name])
        differ = {phase: settings.epochs_for(phase) for phase in phases
                  if counts(phase) and settings.epochs_for(phase) != asked}
        if differ:
            trained = ", ".join(f"{phase} {epochs}" for phase, epochs in differ.items())
            wanted = ", ".join(f"{phase!r}: {asked}" for phase in differ)
            warnings.warn(f"the model's {name}={asked} is for its own one-process fit; this distributed fit trains "
                          f"the settings' epochs ({trained}): give epochs={{{wanted}}} to train {asked} "
                          "(docs/training.md)", UserWarning, stacklevel=stacklevel)
    if given.get("early_stopping") is True and not settings.early_stopping:
        warnings.warn("the model's early_stopping=True is for its own one-process fit; this distributed fit "
                      "stops early only with the settings' early_stopping (and validation_fraction or "
                      "validation_data): docs/watching.md", UserWarning, stacklevel=stacklevel)
