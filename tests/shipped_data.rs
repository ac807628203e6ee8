//! The files shipped in `data/` load with the real parsers.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[test]
fn shipped_example_config_loads_and_matches_the_defaults() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("data/config.yml");
    let config = pegasus_store::Config::load(&path).unwrap();
    assert_eq!(
        config,
        pegasus_store::Config::default(),
        "data/config.yml should show the defaults"
    );
}
