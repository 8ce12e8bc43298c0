"""jaxmb.control: controllers and their stability bounds, gain tuning and Monte Carlo
robustness studies (installed from the top-level control/ folder; not a top-level `control`
package, which would shadow python-control)."""
