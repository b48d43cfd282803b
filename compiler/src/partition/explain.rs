//! Why a device took none of a model's operations, in one line: the rule that declined
//! most of them, its most common detail, and the way out where nnc knows one. Used by
//! the strict-partitioning error and by `nnc compile`'s placement summary.

use std::collections::BTreeMap;

use nnc_formats::plan::Decline;

/// The root cause of `device` declining `declines.len()` of `total` operations (the
/// declines of that device only), or `None` when it declined none.
pub fn root_cause(device: &str, declines: &[&Decline], total: usize) -> Option<String> {
    let (rule, count) = most_common(declines.iter().map(|d| d.rule.as_str()))?;
    let (detail, repeats) = most_common(
        declines
            .iter()
            .filter(|d| d.rule == rule)
            .map(|d| d.detail.as_str()),
    )
    .unwrap_or_default();
    let example = match repeats {
        n if n == count => detail.to_string(),
        1 => format!("e.g. {detail}"),
        n => format!("{n} times: {detail}"),
    };
    let mut line = format!(
        "{device} declined {} of {total} operations; {count} by its {rule} rule ({example})",
        declines.len()
    );
    if let Some(way_out) = way_out(rule, detail) {
        line.push_str("; ");
        line.push_str(way_out);
    }
    Some(line)
}

/// What the user can do about a rule's most common decline, where nnc has an answer.
fn way_out(rule: &str, detail: &str) -> Option<&'static str> {
    let float_on_quantized =
        rule == "operand_types" && detail.contains("TENSOR_FLOAT32") && detail.contains("QUANT8");
    float_on_quantized.then_some(
        "the model computes in float32 and the device only in int8: compile with \
         --quantize int8 --calibration DIR (docs/QUANTIZATION.md)",
    )
}

/// The most frequent item and its count (the first seen among equals).
fn most_common<'a>(items: impl Iterator<Item = &'a str>) -> Option<(&'a str, usize)> {
    let mut counts: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
    for (order, item) in items.enumerate() {
        counts.entry(item).or_insert((0, order)).0 += 1;
    }
    counts
        .into_iter()
        .max_by(|a, b| a.1.0.cmp(&b.1.0).then(b.1.1.cmp(&a.1.1)))
        .map(|(item, (count, _))| (item, count))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decline(rule: &str, detail: &str) -> Decline {
        Decline {
            device: "npu".into(),
            rule: rule.into(),
            detail: detail.into(),
        }
    }

    #[test]
    fn float_operands_on_an_int8_device_suggest_quantizing() {
        let float = decline(
            "operand_types",
            "input 0 is TENSOR_FLOAT32, not TENSOR_QUANT8_ASYMM_SIGNED or TENSOR_QUANT8_ASYMM",
        );
        let op = decline("operations", "RESHAPE is not in its operation list");
        let declines = [&float, &float, &op];
        let line = root_cause("npu", &declines, 5).unwrap();
        assert!(line.starts_with("npu declined 3 of 5 operations; 2 by its operand_types rule"));
        assert!(line.contains("(input 0 is TENSOR_FLOAT32"), "{line}");
        assert!(line.contains("--quantize int8 --calibration DIR"), "{line}");
    }

    #[test]
    fn other_rules_name_the_rule_without_advice() {
        let op = decline("operations", "RESHAPE is not in its operation list");
        let line = root_cause("dsp", &[&op], 1).unwrap();
        assert!(
            line.contains("1 by its operations rule (RESHAPE is not"),
            "{line}"
        );
        let other = decline("operations", "MEAN is not in its operation list");
        let line = root_cause("dsp", &[&op, &other], 2).unwrap();
        assert!(line.contains("(e.g. RESHAPE is not"), "{line}");
        assert!(!line.contains("--quantize"));
        assert_eq!(root_cause("dsp", &[], 1), None);
    }
}
