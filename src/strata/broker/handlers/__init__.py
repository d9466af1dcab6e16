"""One module per Kafka API, each registering itself with ``@handles``; importing this package
imports them all, so adding an API is adding a module."""

import importlib
import pkgutil

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")
