"""What every layer uses and which uses no layer: errors, ids, events, settings, the environment,
JSON decoding from outside, the credential rules, the records every platform shares, and text
wrapped for a terminal.
"""
