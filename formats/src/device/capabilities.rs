//! A device's answer to the framework's start-up questions (NNAPI's driver page, seed
//! 004): its capabilities (performance per operand type, relaxed float32 and control
//! flow performance), type, version string, supported extensions and the number of
//! cache files it needs. Derived from the profile alone, so the answer is the same
//! at every start (no clock, no probing, operand types in code order).

use serde::Serialize;

use super::{CacheFiles, DeviceProfile, PerformanceInfo};
use crate::nn::OperandType;

/// Performance for one operand type.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct OperandPerformance {
    pub operand_type: &'static str,
    pub code: i32,
    #[serde(flatten)]
    pub performance: PerformanceInfo,
}

/// One supported extension and the operand types it defines.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ExtensionSupport {
    pub name: String,
    /// Extension operand types (nnc's own extension defines none: it uses the NN set's).
    pub operand_types: Vec<String>,
}

/// What `getCapabilities`, `getType`, `getVersionString`, `getSupportedExtensions` and
/// `getNumberOfCacheFilesNeeded` answer for a device.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Capabilities {
    pub name: String,
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub version: String,
    /// Every operand type a model's operations use, in code order (SUBGRAPH is covered by
    /// `if_performance` and `while_performance`; the deprecated OEM types are left out).
    /// A type the profile says nothing about reports NNAPI's "no information" (FLT_MAX).
    pub operand_performance: Vec<OperandPerformance>,
    /// FLOAT32 when the model allows computing float32 as float16.
    pub relaxed_float32_to_float16_performance_scalar: PerformanceInfo,
    /// TENSOR_FLOAT32 when the model allows computing float32 as float16.
    pub relaxed_float32_to_float16_performance_tensor: PerformanceInfo,
    /// IF and WHILE: the profile's default performance on a device that runs control
    /// flow, "no information" on one that does not.
    pub if_performance: PerformanceInfo,
    pub while_performance: PerformanceInfo,
    pub extensions: Vec<ExtensionSupport>,
    pub cache_files: CacheFiles,
}

impl DeviceProfile {
    /// The device's capabilities as the NN API's driver reports them.
    pub fn capabilities(&self) -> Capabilities {
        let operand_performance = OperandType::ALL
            .iter()
            .copied()
            .filter(|t| {
                !matches!(
                    t,
                    OperandType::Subgraph | OperandType::Oem | OperandType::TensorOemByte
                )
            })
            .map(|t| OperandPerformance {
                operand_type: t.name(),
                code: t.code(),
                performance: self.performance_for(t, false),
            })
            .collect();
        let control_flow = if self.control_flow || self.is_cpu() {
            self.default_performance.unwrap_or(PerformanceInfo::UNKNOWN)
        } else {
            PerformanceInfo::UNKNOWN
        };
        Capabilities {
            name: self.name.clone(),
            kind: self.kind.name(),
            version: self.version.clone(),
            operand_performance,
            relaxed_float32_to_float16_performance_scalar: self
                .performance_for(OperandType::Float32, true),
            relaxed_float32_to_float16_performance_tensor: self
                .performance_for(OperandType::TensorFloat32, true),
            if_performance: control_flow,
            while_performance: control_flow,
            extensions: self
                .extensions
                .iter()
                .map(|name| ExtensionSupport {
                    name: name.clone(),
                    operand_types: Vec::new(),
                })
                .collect(),
            cache_files: self.cache_files,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_operand_type_is_answered_in_code_order() {
        let caps = DeviceProfile::cpu().capabilities();
        let codes: Vec<i32> = caps.operand_performance.iter().map(|p| p.code).collect();
        let mut sorted = codes.clone();
        sorted.sort_unstable();
        assert_eq!(codes, sorted);
        assert_eq!(codes.len(), OperandType::ALL.len() - 3);
        assert!(
            caps.operand_performance
                .iter()
                .all(|p| p.performance == PerformanceInfo::CPU)
        );
        assert_eq!(caps.if_performance, PerformanceInfo::CPU);
        assert_eq!(caps.extensions[0].name, crate::nn::NNC_EXTENSION);
    }

    #[test]
    fn types_a_profile_omits_report_no_information() {
        let npu = DeviceProfile::from_json(
            r#"{"name": "npu0", "type": "npu", "version": "2.1",
                "performance": {"TENSOR_QUANT8_ASYMM": {"exec_time": 0.1, "power_usage": 0.2}},
                "relaxed_performance": {"TENSOR_FLOAT32": {"exec_time": 0.5, "power_usage": 0.5}},
                "cache_files": {"model": 1, "data": 2}}"#,
            "test",
        )
        .unwrap();
        let caps = npu.capabilities();
        let of = |name: &str| {
            caps.operand_performance
                .iter()
                .find(|p| p.operand_type == name)
                .unwrap()
                .performance
        };
        assert_eq!(of("TENSOR_QUANT8_ASYMM").exec_time, 0.1);
        assert_eq!(of("TENSOR_FLOAT32"), PerformanceInfo::UNKNOWN);
        assert_eq!(
            caps.relaxed_float32_to_float16_performance_tensor.exec_time,
            0.5
        );
        assert_eq!(caps.while_performance, PerformanceInfo::UNKNOWN);
        assert_eq!(caps.cache_files, CacheFiles { model: 1, data: 2 });
        // The same answer every time it is asked.
        assert_eq!(
            serde_json::to_string(&caps).unwrap(),
            serde_json::to_string(&npu.capabilities()).unwrap()
        );
    }
}
