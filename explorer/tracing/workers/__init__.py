"""Work out of process: worker processes under one set of limits, forked from warm templates, pooled for short calls,
holding a device's lock to time it, and the environments of the other tinygrads a trace may run on."""
