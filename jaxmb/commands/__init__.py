"""The commands of ``jaxmb``, one module each, each adding its subparser (``add_parser``) and
registered under the ``jaxmb.commands`` entry-point group (pyproject.toml). They sit above both
workflows: ``simulate`` replays a log by an identified machine (`jaxmb.identification`) or runs
a controller (`jaxmb.control`)."""
