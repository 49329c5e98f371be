//! `weir import` of Kubernetes manifests (issue 56): any text, as YAML documents, converts or is
//! refused with an error, never a panic; what is printed is YAML weir can parse back.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let opts = weir::import::ingress::Options::default();
    if let Ok(c) = weir::import::ingress::convert(text, &opts) {
        let yaml = serde_yaml::to_string(&serde_yaml::Value::Mapping(c.config)).unwrap();
        let _: serde_yaml::Value = serde_yaml::from_str(&yaml).unwrap();
    }
});
