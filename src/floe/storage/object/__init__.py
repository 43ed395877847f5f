"""The object-storage engine (``storage.type = s3``): the log in an S3-compatible
bucket, ``data.dir`` as its cache. See :mod:`floe.storage.object.store`."""

from floe.storage.object.bucket import Bucket, BucketConfigError
from floe.storage.object.store import ObjectStore

__all__ = ["Bucket", "BucketConfigError", "ObjectStore"]
