"""The live web view of ``gk-stream run FILE --view`` (docs/view.md).

``reduce`` turns a view sink's snapshots into small frames (NumPy only); ``health`` reads a Session's
counters; ``server`` is the aiohttp server (the ``view`` extra), imported only when a view is served;
``attach`` is what the CLI calls. Importing this package imports none of them.
"""
