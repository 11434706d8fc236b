"""The course offline: a wheelhouse of the course lock's wheels for a TPU host's Python.

    python -m tpu_scripts wheelhouse [--profile core] [--host-inventory host.json]
    python -m tpu_scripts wheelhouse install DIR... --target SITE     (on the TPU host)
    python -m tpu_scripts wheelhouse inventory -o host.json           (on the TPU host)
    python -m tpu_scripts wheelhouse profiles                          (what each profile covers)

Built here (network: the registry) from requirements.lock, the same versions and sha256, for
CPython 3.11 on manylinux x86-64; what the host already has (its JAX, jaxlib, libtpu, NumPy,
SciPy; with an inventory, what its own package index holds) stays out. Split into numbered
parts under a size limit, each a folder with its own manifest.json. The modules the host runs
(tags, manifest, install, inventory) import the standard library alone: the host has nothing
else before the install.
"""
