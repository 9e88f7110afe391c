# Typing stub for ndws.nn._activations (the kernels; the public functions are
# ndws.nn._act_entries', re-exported by ndws.nn.functional).

ACTIVATIONS: tuple[str, ...]
