//! The documented JSON shape is the code's: docs/report.schema.json must be
//! exactly what the report types generate.

#[test]
fn the_committed_schema_matches_the_report_types() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/report.schema.json");
    let committed = std::fs::read_to_string(path).unwrap_or_default();
    let generated = collector::report_schema();
    assert!(
        committed == generated,
        "docs/report.schema.json is out of date with the report types; regenerate it with\n  \
         cargo run -p skewscope -- json-schema > docs/report.schema.json"
    );
    // And it describes what the report carries.
    let schema: serde_json::Value = serde_json::from_str(&generated).unwrap();
    for field in [
        "skew_ns",
        "skew_corrected_ns",
        "clock_basis",
        "clocks_named_by",
        "probes",
    ] {
        assert!(
            schema["properties"].get(field).is_some(),
            "schema lacks {field}"
        );
    }
}
