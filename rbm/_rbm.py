"""Placeholder: replaced by the model implementation."""


class RBM:
    def __init__(self, *args, **kwargs):
        raise NotImplementedError("RBM is not implemented yet")
