//! Which instruction-set paths the kernels take on this processor: one place that
//! detects features (once) and names the choice, for the kernels and for reports
//! (`nnc bench --json`, `nnc devices`).

use std::sync::OnceLock;

use serde::Serialize;

/// The processor features the kernels look for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct CpuFeatures {
    pub avx2: bool,
    pub fma: bool,
    pub avx512f: bool,
    pub avx512bw: bool,
    pub avx512_vnni: bool,
    pub avx_vnni: bool,
}

/// Detected once per process.
pub fn cpu_features() -> CpuFeatures {
    static FEATURES: OnceLock<CpuFeatures> = OnceLock::new();
    *FEATURES.get_or_init(detect)
}

#[cfg(target_arch = "x86_64")]
fn detect() -> CpuFeatures {
    use std::arch::is_x86_feature_detected as has;
    CpuFeatures {
        avx2: has!("avx2"),
        fma: has!("fma"),
        avx512f: has!("avx512f"),
        avx512bw: has!("avx512bw"),
        avx512_vnni: has!("avx512vnni"),
        avx_vnni: has!("avxvnni"),
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn detect() -> CpuFeatures {
    CpuFeatures::default()
}

/// True when the float kernels' AVX2+FMA paths run.
pub fn float_avx2_fma() -> bool {
    let f = cpu_features();
    f.avx2 && f.fma
}

/// True when the quantized kernels' AVX2 paths run.
pub fn int8_avx2() -> bool {
    cpu_features().avx2
}

/// What the kernels run on this processor.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct KernelIsa {
    pub arch: &'static str,
    pub cpu_features: CpuFeatures,
    /// The float kernels' path (`avx2+fma` or `portable`).
    pub float: &'static str,
    /// The quantized kernels' path (`avx2` or `portable`).
    pub int8: &'static str,
}

impl KernelIsa {
    /// One line: `float avx2+fma, int8 avx2 (cpu: avx2 fma avx512f ...)`.
    pub fn summary(&self) -> String {
        let f = &self.cpu_features;
        let present: Vec<&str> = [
            ("avx2", f.avx2),
            ("fma", f.fma),
            ("avx512f", f.avx512f),
            ("avx512bw", f.avx512bw),
            ("avx512_vnni", f.avx512_vnni),
            ("avx_vnni", f.avx_vnni),
        ]
        .into_iter()
        .filter_map(|(name, on)| on.then_some(name))
        .collect();
        format!(
            "float {}, int8 {} ({} features: {})",
            self.float,
            self.int8,
            self.arch,
            if present.is_empty() {
                "none of interest".to_string()
            } else {
                present.join(" ")
            }
        )
    }
}

/// The paths the kernels choose here.
pub fn report() -> KernelIsa {
    KernelIsa {
        arch: std::env::consts::ARCH,
        cpu_features: cpu_features(),
        float: if float_avx2_fma() {
            "avx2+fma"
        } else {
            "portable"
        },
        int8: if int8_avx2() { "avx2" } else { "portable" },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_report_names_the_paths_the_kernels_take() {
        let r = report();
        assert_eq!(r.float == "avx2+fma", float_avx2_fma());
        assert_eq!(r.int8 == "avx2", int8_avx2());
        assert!(
            r.summary()
                .starts_with(&format!("float {}, int8 {}", r.float, r.int8))
        );
        // Stable within a process: detection runs once.
        assert_eq!(report(), r);
    }
}
