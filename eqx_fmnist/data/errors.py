"""The errors about Fashion-MNIST's files: one `DataError` family."""


class DataError(ValueError):
    """A Fashion-MNIST file is missing, malformed or fails its checksum."""


class DataNotFoundError(DataError):
    """No folder holds all four files and they could not be downloaded."""


class DownloadError(DataError):
    """Every mirror failed for a file; the message lists each URL and why."""


class ChecksumError(DataError):
    """A file's content is not the published Fashion-MNIST content."""
