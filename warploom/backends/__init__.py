"""The Gluon emitters, one per target (which target uses which: `warploom.targets`). Importing this imports no GPU
library beyond Triton's pure-Python front end.

sm_90a: wgmma, run on the H100 (gluon_sm90.py; grouped GEMMs gluon_grouped.py). sm_100a: tcgen05 into tensor memory
(gluon_sm100.py), planned by rule 19 and cross-compiled. gfx1250: one software-pipelined partition of TDM copies and
wmma (gluon_gfx1250.py), planned by rule 20 and cross-compiled.
"""
