try:
    from nvfp4_suite.vectors.cli import main
except ModuleNotFoundError as e:
    if e.name != "nvfp4_suite":
        raise
    raise SystemExit("error: the suite is imported as nvfp4_suite, which is not installed here: "
                     "run `python -m pip install -e .` in its checkout") from None

raise SystemExit(main())
