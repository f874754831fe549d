"""Running tinygrad, by concern: `tg/` is the only package that imports tinygrad (the seam); `pipeline/` runs one convolution
or any program through tinygrad's pipeline and records every stage as data; `workers/` runs that work out of process under one set
of limits; `compilers/` turns a kernel's source into compile facts and SASS without the device; `enrichments/` computes what a
trace leaves for first view; `algorithms/` builds the convolutions the pipeline traces."""
