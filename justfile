# Convenience recipes; every one is a plain cargo command you can run without `just`.

# Build everything (debug).
build:
    cargo build --workspace

# The README's test command.
test:
    cargo test --workspace

# The demo on the built-in defaults (the README's first command).
demo:
    cargo run --release --example demo

# Benchmarks; results go to docs/PERFORMANCE.md by hand.
bench:
    cargo build --release --bins
    cargo run --release --example bench_daemon -- foundation

# Format and lint exactly as the merge bar does.
check:
    cargo fmt --all -- --check
    cargo clippy --workspace --all-targets -- -D warnings
