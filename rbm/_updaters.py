"""Parameter updaters: SGD with (Nesterov) momentum, Adagrad, Adam; L2 weight decay.

An updater owns its optimizer state (velocity, squared-gradient history), which stays
local to a node: only the parameters themselves are merged between nodes.  All math
goes through the arrays' own namespace, so updaters work on numpy and cupy alike.
"""

from __future__ import annotations

from typing import Any, Mapping

from ._gpu import fused_ops_for

__all__ = ["Updater", "SGD", "Adagrad", "Adam", "make_updater", "UPDATERS", "anneal_factor"]


class Updater:
    """Base class: ``step(params, grads)`` updates ``params`` in place.

    Parameters
    ----------
    learning_rate : float
        Step size.
    l2 : float
        L2 weight decay, applied to parameters whose name is listed in ``decay``
        (weights, not biases) by :meth:`step`.
    """

    def __init__(self, learning_rate: float = 0.01, l2: float = 0.0) -> None:
        if not learning_rate > 0:
            raise ValueError(f"learning_rate must be > 0, got {learning_rate}")
        if l2 < 0:
            raise ValueError(f"l2 must be >= 0, got {l2}")
        self.learning_rate = float(learning_rate)
        self.l2 = float(l2)
        self.state: dict[str, dict[str, Any]] = {}

    def step(self, params: Mapping[str, Any], grads: Mapping[str, Any], decay: tuple[str, ...] = ()) -> None:
        """Apply one update. ``grads`` are gradients of the loss to *minimize*.

        On the GPU branch each parameter's update (L2 term included) is one fused kernel.
        """
        for name, grad in grads.items():
            param = params[name]
            ops = fused_ops_for(param)
            if ops is not None:
                self._fused_update(ops, name, param, grad, self.l2 if name in decay else 0.0)
                continue
            if self.l2 and name in decay:
                grad = grad + self.l2 * param
            self._update(name, param, grad)

    def _update(self, name: str, param: Any, grad: Any) -> None:
        raise NotImplementedError

    def _fused_update(self, ops: Any, name: str, param: Any, grad: Any, l2: float) -> None:
        """The same update as :meth:`_update` (with ``grad + l2 * param``) in one fused kernel."""
        raise NotImplementedError

    def reset(self) -> None:
        """Forget optimizer state (e.g. when a new training phase starts)."""
        self.state.clear()


class SGD(Updater):
    """SGD with momentum: ``v <- mu * v - lr * g; w <- w + v`` (Nesterov: look-ahead form)."""

    def __init__(self, learning_rate: float = 0.01, momentum: float = 0.9, nesterov: bool = False, l2: float = 0.0) -> None:
        super().__init__(learning_rate, l2)
        if not 0.0 <= momentum < 1.0:
            raise ValueError(f"momentum must be in [0, 1), got {momentum}")
        self.momentum = float(momentum)
        self.nesterov = bool(nesterov)

    def _update(self, name: str, param: Any, grad: Any) -> None:
        if self.momentum == 0.0:
            param -= self.learning_rate * grad
            return
        state = self.state.setdefault(name, {})
        velocity = state.get("v")
        if velocity is None:
            velocity = state["v"] = param * 0
        velocity *= self.momentum
        velocity -= self.learning_rate * grad
        if self.nesterov:
            param += self.momentum * velocity - self.learning_rate * grad
        else:
            param += velocity

    def _fused_update(self, ops: Any, name: str, param: Any, grad: Any, l2: float) -> None:
        state = self.state.setdefault(name, {})
        if "v" not in state:
            state["v"] = param * 0
        ops.sgd_step_(param, state["v"], grad, self.momentum, self.learning_rate, l2, self.nesterov)


class Adagrad(Updater):
    """Adagrad: ``h <- h + g^2; w <- w - lr * g / (sqrt(h) + eps)``."""

    def __init__(self, learning_rate: float = 0.01, eps: float = 1e-8, l2: float = 0.0) -> None:
        super().__init__(learning_rate, l2)
        self.eps = float(eps)

    def _update(self, name: str, param: Any, grad: Any) -> None:
        state = self.state.setdefault(name, {})
        history = state.get("h")
        if history is None:
            history = state["h"] = param * 0
        history += grad * grad
        param -= self.learning_rate * grad / (history**0.5 + self.eps)

    def _fused_update(self, ops: Any, name: str, param: Any, grad: Any, l2: float) -> None:
        state = self.state.setdefault(name, {})
        if "h" not in state:
            state["h"] = param * 0
        ops.adagrad_step_(param, state["h"], grad, self.learning_rate, self.eps, l2)


class Adam(Updater):
    """Adam (Kingma & Ba, 2015) with bias correction."""

    def __init__(self, learning_rate: float = 0.001, beta1: float = 0.9, beta2: float = 0.999,
                 eps: float = 1e-8, l2: float = 0.0) -> None:
        super().__init__(learning_rate, l2)
        if not (0.0 <= beta1 < 1.0 and 0.0 <= beta2 < 1.0):
            raise ValueError(f"beta1 and beta2 must be in [0, 1), got {beta1}, {beta2}")
        self.beta1, self.beta2, self.eps = float(beta1), float(beta2), float(eps)

    def _next_step(self, name: str, param: Any) -> tuple[Any, Any, float]:
        """The moments of ``name`` and the bias-corrected step size of its next update."""
        state = self.state.setdefault(name, {})
        if "m" not in state:
            state["m"], state["v"], state["t"] = param * 0, param * 0, 0
        state["t"] += 1
        t = state["t"]
        return state["m"], state["v"], self.learning_rate * (1 - self.beta2**t) ** 0.5 / (1 - self.beta1**t)

    def _update(self, name: str, param: Any, grad: Any) -> None:
        m, v, step = self._next_step(name, param)
        m *= self.beta1
        m += (1 - self.beta1) * grad
        v *= self.beta2
        v += (1 - self.beta2) * grad * grad
        param -= step * m / (v**0.5 + self.eps)

    def _fused_update(self, ops: Any, name: str, param: Any, grad: Any, l2: float) -> None:
        m, v, step = self._next_step(name, param)
        ops.adam_step_(param, m, v, grad, self.beta1, self.beta2, step, self.eps, l2)


UPDATERS = {"sgd": SGD, "adagrad": Adagrad, "adam": Adam}


def make_updater(name: str, **settings: Any) -> Updater:
    """Build an updater by name (``"sgd" | "adagrad" | "adam"``)."""
    if name not in UPDATERS:
        raise ValueError(f"unknown updater {name!r}; choose one of {sorted(UPDATERS)}")
    return UPDATERS[name](**settings)


def anneal_factor(planned: tuple[float, int] | None, within_pass: float, fraction: float) -> float:
    """Learning-rate factor of a fit's linear anneal: 1, then linear from 1 towards 0 over the
    last ``fraction`` of the fit's planned updates.

    Parameters
    ----------
    planned : ``(done, total)`` when this is pass ``done + 1`` of ``total`` planned ones (a
        ``fit``; ``done`` may be a fraction: a partition's place in a distributed fit, see
        :class:`rbm._model.SchedulePlace`); None where the total is unknown (``partial_fit``, or
        ``train_partition`` without a plan): factor 1.
    within_pass : how far into the current pass, in [0, 1).
    fraction : share of the fit annealed, in [0, 1] (0: constant rate).

    Stochastic gradient methods at a constant rate keep jumping by the gradient noise; a rate
    that ends at zero lets the parameters settle, whatever the number of passes or their size.
    Past the plan's end (a distributed task trained beyond it) the factor stays 0, never negative.
    """
    if planned is None or fraction == 0:
        return 1.0
    done, total = planned
    left = 1.0 - (done + within_pass) / total  # fraction of the fit still to come: in (0, 1] in a fit
    return max(0.0, min(1.0, left / fraction))
