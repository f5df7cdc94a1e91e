"""The live web view of ``gk-stream run FILE --view`` (docs/view.md).

``reduce`` turns a view sink's snapshots into small frames (NumPy only; the sink hands them over
in shared memory, io/view_ring.py); ``health`` reads a Session's counters; ``server`` starts the
view's server process and feeds it over ``control``; ``page`` is that process, the aiohttp server
(the ``view`` extra); ``attach`` is what the CLI calls. Importing this package imports none of them.
"""
