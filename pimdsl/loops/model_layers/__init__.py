"""Pieces of a model that more than one run loop may use, with no loop-specific code: the op graph of
one decoder layer cut into segments (`layer_work`), the weight blobs of its layers (`layer_blobs`)
and their safetensors files (`weight_files`), and a plain numpy forward pass (`numpy_forward`)."""
