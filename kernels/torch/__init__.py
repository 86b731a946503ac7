"""The vectorised torch backend (any device, exact class): ``backend``."""
