"""jaxmb's version, which the files users keep (parameter files, study summaries) record."""

__version__ = "0.1.0"
