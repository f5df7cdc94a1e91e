"""The YAML pipeline format (version 1): safe loading, validation with FILE:LINE:COL errors, dumping.

>>> from pygpukit_dsp.spec import load_file, dump_yaml, pipeline_document
>>> configs = load_file("pipelines/demo.yaml")        # list[PipelineConfig]
>>> print(dump_yaml(pipeline_document(configs)))      # readable YAML that loads back the same

The format is documented in docs/yaml.md.
"""

from .dump import dump_yaml, pipeline_document
from .loader import Marks, load_marked
from .schema import (BACKENDS, DEFAULT_BLOCK_SIZE, DEFAULT_KEYS, PIPELINE_KEYS, SUPPORTED_VERSIONS,
                     PipelineConfig, load_file, load_text)

__all__ = [
    "PipelineConfig", "load_file", "load_text", "pipeline_document", "dump_yaml",
    "load_marked", "Marks", "SUPPORTED_VERSIONS", "DEFAULT_BLOCK_SIZE", "BACKENDS",
    "PIPELINE_KEYS", "DEFAULT_KEYS",
]
