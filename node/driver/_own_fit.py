"""A model's settings for its own one-process ``fit``, which a distributed fit does not read: said, not ignored.

The trainer's :class:`~node.driver._settings.TrainingSettings` say how long each phase trains and when it
stops (docs/training.md).  A model built with epochs or early stopping of its own (``DBN(finetune_epochs=50)``)
would otherwise train the settings' 5 epochs without a word: :func:`warn_own_fit_settings` warns, once per
setting, naming what the fit trains instead and the setting that would train what the model asked for.
"""

from __future__ import annotations

import inspect
import warnings
from typing import Any, Callable, Mapping

#: Per model kind, the model's own epoch settings and the phases each counts (a phase name to True).
OWN_EPOCHS: Mapping[str, Mapping[str, Callable[[str], bool]]] = {
    "dbn": {"pretrain_epochs": lambda phase: phase != "finetune", "finetune_epochs": lambda phase: phase == "finetune"},
    "rbm": {"n_iter": lambda phase: True},
    "convnet": {"epochs": lambda phase: True},
}


def given_settings(model: Any) -> dict[str, Any]:
    """The model's constructor settings that differ from its class's defaults (what its maker asked for)."""
    try:
        defaults = {name: parameter.default for name, parameter in
                    inspect.signature(type(model).__init__).parameters.items()
                    if parameter.default is not inspect.Parameter.empty}
    except (TypeError, ValueError):  # a constructor Python cannot read: nothing known to be asked for
        return {}
    return {name: getattr(model, name) for name, default in defaults.items()
            if hasattr(model, name) and getattr(model, name) != default}


def warn_own_fit_settings(model: Any, kind: str | None, settings: Any, phases: list[str], *, stacklevel: int) -> None:
    """Warn (``UserWarning``) of each own-fit setting ``model`` was given that this fit trains otherwise."""
    given = given_settings(model)
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
