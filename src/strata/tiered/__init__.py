"""KIP-405 tiered storage: the plugin API, its backends and the RemoteLogManager.

Layering: ``tiered`` sits above ``log`` (it reads rolled segments and their indexes) and below
``broker`` (which owns the event loop and wires the RemoteLogManager in). ``tiered.api`` imports
nothing from Strata but ``common``, so a plugin written against it depends on nothing else.
"""
