"""Studies of our own machines: what limits a realtime stream on the GPU machine (how many streams
one GPU carries, where a thread's time went when it made no progress). Not part of the product:
nothing in ``pygpukit_dsp`` imports them. The scripts beside this folder run them
(``python benchmarks/capacity.py``, ``python benchmarks/cadence.py``; their folder is then first on
``sys.path``, which makes ``studies`` importable); tests/benchmarks tests them.
"""
