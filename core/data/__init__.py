"""Input data: the classification pipeline and Grain datasets, the digits set.

The public surface of core.data.pipeline is re-exported here."""

from core.data.pipeline import (  # noqa: F401 (the package's public surface)
    FAULTS,
    ColumnSource,
    DataContract,
    FieldSpec,
    Shard,
    batches,
    batches_per_epoch,
    classification_contract,
    collate,
    epoch_order,
    grain_dataset,
    grain_iterator,
    grain_loader,
    inject_fault,
    loader_state_from_json,
    loader_state_to_json,
    make_columns,
    masked_mean,
    take_ids,
)
