"""Reference solution of data_checkpoints.save_full_state.bad_files: the files of a checkpoint
step that disagree with its manifest (missing, resized, changed, or not listed)."""

import hashlib


def bad_files(files, manifest):
    """Sorted relative paths of every file that fails verification against ``manifest``.

    files: {relative path: uint8 array of the file's bytes} of everything in the step
    directory now (manifest.json aside). manifest["files"]: {relative path: {"bytes": size,
    "sha256": hex digest}} written when the step was committed.
    """
    listed = manifest["files"]
    bad = set(files) - set(listed)  # not in the manifest: written later, or by someone else
    for path, want in listed.items():
        if path not in files:
            bad.add(path)  # missing
            continue
        content = files[path].tobytes()
        if len(content) != want["bytes"]:
            bad.add(path)  # truncated or grown: cheap to see, no hashing needed
        elif hashlib.sha256(content).hexdigest() != want["sha256"]:
            bad.add(path)  # same size, other bytes: only the hash sees a flipped bit
    return sorted(bad)
