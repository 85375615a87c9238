//! What `chronyc -c tracking` prints, as the probe and the agent read it.

use skewscope_core::chrony::parse_tracking;

/// Any output, even one cut short or with huge or non-numeric fields: read
/// or refused (`None`), never a panic; what is read had the 14 fields of
/// `chronyc -c tracking`, and its reference is the second one as printed.
pub fn chrony(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    if let Some(tracking) = parse_tracking(&text) {
        let fields: Vec<&str> = text.trim().split(',').collect();
        assert!(fields.len() >= 14, "read from {} fields", fields.len());
        assert_eq!(tracking.reference, fields[1]);
    }
}
