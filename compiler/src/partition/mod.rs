//! Partitioning: which device runs each operation, as steps of contiguous operations,
//! with the reason for every placement and every device that declined.
//!
//! The decision follows NNAPI's reference algorithm (`../shared/NNAPI.md`):
//! 1. every device answers, per operation, whether it supports it: that answer is
//!    [`DeviceProfile::check`], whose [`Decline`] the plan keeps as the explanation;
//! 2. each supporting device is scored by its performance for the type of the operation's
//!    first input (`exec_time`, or `power_usage` for low power); lowest wins, a tie goes
//!    to the CPU;
//! 3. steps come from per-device ready queues ([`steps::build_steps`]).
//!
//! Beyond the reference, a transfer-cost guard (see [`cost`]) moves a whole step to
//! another device that supports all of it when that makes the plan cheaper: a cheap
//! operation is not bounced to an accelerator and back when moving its data costs more
//! than the accelerator saves.
//!
//! The model's operations are then reordered so that each step is contiguous; operands
//! are untouched.

mod cost;
mod explain;
mod steps;

pub use explain::root_cause;

use std::collections::HashMap;

use nnc_formats::container::is_weight;
use nnc_formats::crypto::{Algorithm, Mode};
use nnc_formats::device::DeviceProfile;
use nnc_formats::nn::{Lifetime, Model, OperandType, Operation, validate};
use nnc_formats::plan::{Decline, ExecutionPlan, PartitionMode, Placement, Preference};

use crate::error::CompileError;
use cost::CostModel;
use steps::{Graph, Step};

/// The rule recorded for a CPU that could run an operation but may not, because its
/// weights would be decrypted in host memory.
pub const RULE_NO_PLAINTEXT_FALLBACK: &str = "no_plaintext_fallback";

/// Bounds on the guard's search (each round evaluates one move per step and device).
const GUARD_MAX_ROUNDS: usize = 64;
const GUARD_MAX_EVALUATIONS: usize = 4096;

/// How to partition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PartitionOptions {
    pub mode: PartitionMode,
    pub preference: Preference,
    /// The file's weight encryption, when it will be encrypted: devices that cannot
    /// decrypt it decline operations reading weights.
    pub encryption: Option<(Algorithm, Mode)>,
    /// Fail rather than place an operation reading encrypted weights on the CPU (which
    /// would decrypt them in host memory).
    pub no_plaintext_fallback: bool,
}

impl Default for PartitionOptions {
    fn default() -> Self {
        PartitionOptions {
            mode: PartitionMode::Fallback,
            preference: Preference::FastSingleAnswer,
            encryption: None,
            no_plaintext_fallback: false,
        }
    }
}

/// What the devices answered for one operation.
struct Answer {
    /// Supporting devices (indices into the candidate list).
    supporting: Vec<usize>,
    declined: Vec<Decline>,
    /// The operation reads weights and the file is encrypted.
    reads_encrypted_weights: bool,
    /// The operand type its performance is looked up by.
    lookup_type: OperandType,
}

/// Partitions `model` across `profiles` and returns the model with its operations
/// reordered so that every step is contiguous, and the plan (placements in the new
/// operation order).
///
/// In fallback mode the CPU is always a candidate: the first `cpu` profile listed, or the
/// built-in [`DeviceProfile::cpu`]. In strict mode only the listed profiles are. Failures
/// the user must act on (strict mode, refused plaintext fallback) are
/// [`CompileError::Placement`] with every operation concerned listed.
pub fn partition(
    model: &Model,
    profiles: &[DeviceProfile],
    options: &PartitionOptions,
) -> Result<(Model, ExecutionPlan), CompileError> {
    validate(model)?;
    for (i, p) in profiles.iter().enumerate() {
        p.validate(&format!("device profile '{}'", p.name))
            .map_err(|e| CompileError::Options(e.to_string()))?;
        if profiles[..i].iter().any(|q| q.name == p.name) {
            return Err(CompileError::Options(format!(
                "two device profiles are named '{}'; device names must be unique",
                p.name
            )));
        }
    }
    let devices = candidates(profiles, options.mode)?;
    let cpu = devices.iter().position(DeviceProfile::is_cpu);
    let ops = &model.main.operations;
    let relaxed = model.relax_computation_float32_to_float16;
    let metric_name = match options.preference {
        Preference::LowPower => "power_usage",
        Preference::FastSingleAnswer | Preference::SustainedSpeed => "exec_time",
    };
    let ratio_of = |d: usize, t: OperandType| {
        let p = devices[d].performance_for(t, relaxed);
        match options.preference {
            Preference::LowPower => p.power_usage,
            Preference::FastSingleAnswer | Preference::SustainedSpeed => p.exec_time,
        }
    };

    // 1. Ask every device about every operation.
    // Each device's verdicts come in one pass over the model, which finds the verdict
    // on a subgraph once, not once per IF or WHILE that reaches it.
    let mut verdicts: Vec<_> = match options.mode {
        PartitionMode::CpuOnly => Vec::new(),
        _ => devices
            .iter()
            .map(|d| d.check_operations(model, options.encryption).into_iter())
            .collect(),
    };
    let answers: Vec<Answer> = ops
        .iter()
        .map(|op| ask(op, model, &devices, &mut verdicts, options))
        .collect();

    // 2. Score; collect what cannot be placed.
    let mut assign = vec![0usize; ops.len()];
    let mut reasons = vec![String::new(); ops.len()];
    let mut unsupported = Vec::new();
    let mut plaintext = Vec::new();
    for (i, answer) in answers.iter().enumerate() {
        let blocked = options.no_plaintext_fallback && answer.reads_encrypted_weights;
        if options.mode == PartitionMode::CpuOnly {
            if blocked {
                plaintext.push(i);
            }
            assign[i] = 0;
            reasons[i] = "cpu-only mode".into();
            continue;
        }
        if answer.supporting.is_empty() {
            let refused_cpu = answer
                .declined
                .iter()
                .any(|d| d.rule == RULE_NO_PLAINTEXT_FALLBACK);
            match (options.mode, cpu) {
                _ if refused_cpu || (blocked && options.mode == PartitionMode::Fallback) => {
                    plaintext.push(i)
                }
                (PartitionMode::Fallback, Some(c)) => {
                    assign[i] = c;
                    reasons[i] = "fallback: no device supports it, not even the CPU profile".into();
                }
                _ => unsupported.push(i),
            }
            continue;
        }
        let t = answer.lookup_type;
        // Lowest ratio wins; a tie goes to the CPU, then to the first listed device.
        let Some(&best) = answer.supporting.iter().min_by(|&&a, &&b| {
            ratio_of(a, t)
                .total_cmp(&ratio_of(b, t))
                .then(devices[b].is_cpu().cmp(&devices[a].is_cpu()))
                .then(a.cmp(&b))
        }) else {
            continue;
        };
        assign[i] = best;
        reasons[i] = score_reason(
            &devices,
            answer,
            best,
            (t, relaxed),
            (options.mode, metric_name),
            &ratio_of,
        );
    }
    if !unsupported.is_empty() || !plaintext.is_empty() {
        return Err(CompileError::Placement(failure_message(
            model,
            &answers,
            &devices,
            options,
            &unsupported,
            &plaintext,
        )));
    }

    // 3. Steps, improved by the transfer-cost guard.
    let graph = Graph::new(model);
    // NNAPI takes the first non-empty queue; the CPU's comes last so that accelerators
    // run as much as they can before the CPU takes over.
    let order: Vec<usize> = (0..devices.len())
        .filter(|&d| !devices[d].is_cpu())
        .chain((0..devices.len()).filter(|&d| devices[d].is_cpu()))
        .collect();
    if options.mode != PartitionMode::CpuOnly && devices.len() > 1 {
        let costs = CostModel {
            graph: &graph,
            devices: &devices,
            work: ops.iter().map(|op| cost::work(op, model)).collect(),
            ratio: answers
                .iter()
                .map(|a| {
                    (0..devices.len())
                        .map(|d| ratio_of(d, a.lookup_type))
                        .collect()
                })
                .collect(),
        };
        let allowed: Vec<Vec<usize>> = answers
            .iter()
            .zip(&assign)
            .map(|(a, &d)| {
                if a.supporting.is_empty() {
                    vec![d]
                } else {
                    a.supporting.clone()
                }
            })
            .collect();
        guard(&costs, &allowed, &order, &mut assign, &mut reasons);
    }
    // An IF or WHILE takes its subgraphs along: the plan's steps list main's operations,
    // and every operation of a referenced subgraph runs on its IF's or WHILE's device.
    let mut reached = ReachedGraphs::new(model);
    for (i, op) in ops.iter().enumerate() {
        if op.op_type.is_control_flow() {
            let graphs = reached.listed(&model.operation_subgraphs(0, i));
            reasons[i].push_str(&format!(
                "; runs subgraph(s) {graphs} with all their operations on {}",
                devices[assign[i]].name
            ));
        }
    }
    let steps = steps::build_steps(&graph, &assign, &order);
    build_plan(
        model, &devices, &answers, options, &assign, &reasons, &steps,
    )
}

/// [`Model::graphs_reached`] for many operations, listed as the plan's reasons show
/// them: the walk follows each graph's distinct subgraphs rather than all its
/// operations, and runs once per distinct set of subgraphs operations name.
struct ReachedGraphs {
    /// Empty until the first question.
    children: Vec<Vec<usize>>,
    listed: HashMap<Vec<usize>, String>,
    /// By graph number, the walk that last visited it (walks count from 1).
    visited: Vec<usize>,
    walks: usize,
}

impl ReachedGraphs {
    fn new(model: &Model) -> ReachedGraphs {
        let children = if model
            .main
            .operations
            .iter()
            .any(|op| op.op_type.is_control_flow())
        {
            model.subgraph_children()
        } else {
            Vec::new()
        };
        ReachedGraphs {
            visited: vec![0; children.len()],
            children,
            listed: HashMap::new(),
            walks: 0,
        }
    }

    /// The graphs reachable from `direct` (valid graph numbers), ascending, joined by
    /// ", ".
    fn listed(&mut self, direct: &[usize]) -> String {
        if let Some(text) = self.listed.get(direct) {
            return text.clone();
        }
        self.walks += 1;
        let mut reached = Vec::new();
        let mut stack = direct.to_vec();
        while let Some(t) = stack.pop() {
            match self.visited.get_mut(t) {
                Some(v) if *v != self.walks => *v = self.walks,
                _ => continue,
            }
            reached.push(t);
            if let Some(next) = self.children.get(t) {
                stack.extend(next);
            }
        }
        reached.sort_unstable();
        // At most LISTED graphs by number: thousands of IFs each reaching a wide shared
        // fan-out would otherwise make the plan's text grow as their product.
        const LISTED: usize = 16;
        let mut text = reached
            .iter()
            .take(LISTED)
            .map(|t| t.to_string())
            .collect::<Vec<_>>()
            .join(", ");
        if reached.len() > LISTED {
            text.push_str(&format!(" and {} more", reached.len() - LISTED));
        }
        self.listed.insert(direct.to_vec(), text.clone());
        text
    }
}

/// The devices that compete for operations.
fn candidates(
    profiles: &[DeviceProfile],
    mode: PartitionMode,
) -> Result<Vec<DeviceProfile>, CompileError> {
    let listed_cpu = profiles.iter().find(|p| p.is_cpu()).cloned();
    Ok(match mode {
        PartitionMode::CpuOnly => vec![listed_cpu.unwrap_or_else(DeviceProfile::cpu)],
        PartitionMode::Fallback => {
            let mut devices = profiles.to_vec();
            if listed_cpu.is_none() {
                let mut builtin = DeviceProfile::cpu();
                // Keep names unique if a non-CPU profile happens to be called "cpu".
                while devices.iter().any(|d| d.name == builtin.name) {
                    builtin.name.push('_');
                }
                devices.push(builtin);
            }
            devices
        }
        PartitionMode::Strict => {
            if profiles.is_empty() {
                return Err(CompileError::Options(
                    "strict partitioning needs at least one device profile".into(),
                ));
            }
            profiles.to_vec()
        }
    })
}

/// Every device's answer for one operation.
fn ask(
    op: &Operation,
    model: &Model,
    devices: &[DeviceProfile],
    verdicts: &mut [std::vec::IntoIter<Result<(), Decline>>],
    options: &PartitionOptions,
) -> Answer {
    let reads_encrypted_weights = options.encryption.is_some()
        && op
            .inputs
            .iter()
            .filter_map(|&i| model.operand(i))
            .any(is_weight);
    let mut supporting = Vec::new();
    let mut declined = Vec::new();
    if options.mode != PartitionMode::CpuOnly {
        for (d, device) in devices.iter().enumerate() {
            let verdict = verdicts
                .get_mut(d)
                .and_then(Iterator::next)
                .unwrap_or_else(|| device.check(op, model, options.encryption));
            match verdict {
                Ok(())
                    if device.is_cpu()
                        && options.no_plaintext_fallback
                        && reads_encrypted_weights =>
                {
                    declined.push(Decline {
                        device: device.name.clone(),
                        rule: RULE_NO_PLAINTEXT_FALLBACK.into(),
                        detail: "its encrypted weights would be decrypted in host memory".into(),
                    });
                }
                Ok(()) => supporting.push(d),
                Err(decline) => declined.push(decline),
            }
        }
    }
    Answer {
        supporting,
        declined,
        reads_encrypted_weights,
        lookup_type: lookup_type(op, model),
    }
}

/// The operand type NNAPI looks performance up by: the operation's first input. PACK's
/// first input is its axis, so the first tensor input is used, then the first input, then
/// the first output.
fn lookup_type(op: &Operation, model: &Model) -> OperandType {
    let operands = |list: &[u32]| -> Vec<OperandType> {
        list.iter()
            .filter_map(|&i| model.operand(i))
            .filter(|o| o.lifetime != Lifetime::NoValue)
            .map(|o| o.operand_type)
            .collect()
    };
    let inputs = operands(&op.inputs);
    inputs
        .iter()
        .copied()
        .find(|t| t.is_tensor())
        .or_else(|| inputs.first().copied())
        .or_else(|| operands(&op.outputs).first().copied())
        .unwrap_or(OperandType::TensorFloat32)
}

/// "exec_time for TENSOR_FLOAT32: dsp-float 0.6, cpu 1; lowest wins".
fn score_reason(
    devices: &[DeviceProfile],
    answer: &Answer,
    best: usize,
    (t, relaxed): (OperandType, bool),
    (mode, metric): (PartitionMode, &str),
    ratio_of: &dyn Fn(usize, OperandType) -> f64,
) -> String {
    let mut ranked = answer.supporting.clone();
    // The decision's order: ratio, then the CPU, then listing order.
    ranked.sort_by(|&a, &b| {
        ratio_of(a, t)
            .total_cmp(&ratio_of(b, t))
            .then(devices[b].is_cpu().cmp(&devices[a].is_cpu()))
            .then(a.cmp(&b))
    });
    let scores: Vec<String> = ranked
        .iter()
        .map(|&d| format!("{} {}", devices[d].name, show_ratio(ratio_of(d, t))))
        .collect();
    let relaxed = if relaxed && matches!(t, OperandType::TensorFloat32 | OperandType::Float32) {
        " (relaxed to float16)"
    } else {
        ""
    };
    if ranked.iter().all(|&d| devices[d].is_cpu()) && !answer.declined.is_empty() {
        return match mode {
            PartitionMode::Strict => "only the CPU supports it".into(),
            _ => "fallback to the CPU: no other device supports it".into(),
        };
    }
    let verdict = if ranked.len() == 1 {
        "the only supporting device"
    } else if ranked
        .iter()
        .any(|&d| d != best && ratio_of(d, t) == ratio_of(best, t))
    {
        if devices[best].is_cpu() {
            "a tie goes to the CPU"
        } else {
            "a tie goes to the first listed device"
        }
    } else {
        "lowest wins"
    };
    format!(
        "{metric} for {}{relaxed}: {}; {verdict}",
        t.name(),
        scores.join(", ")
    )
}

fn show_ratio(r: f64) -> String {
    if r >= f64::from(f32::MAX) {
        "unknown".into()
    } else {
        format!("{r}")
    }
}

/// The transfer-cost guard: greedy descent on the plan cost. Each round tries moving each
/// step, whole, to every other device that supports all its operations, and applies the
/// single move that lowers the cost most. Bounded, deterministic.
fn guard(
    costs: &CostModel,
    allowed: &[Vec<usize>],
    order: &[usize],
    assign: &mut [usize],
    reasons: &mut [String],
) {
    let mut evaluations = 0;
    for _ in 0..GUARD_MAX_ROUNDS {
        let steps = steps::build_steps(costs.graph, assign, order);
        let current = costs.cost(assign, &steps);
        // (saving, step, device, compute delta, transfer+launch delta)
        let mut best: Option<(f64, usize, usize, f64, f64)> = None;
        'steps: for (s, step) in steps.iter().enumerate() {
            for d in 0..costs.devices.len() {
                if d == step.device || !step.operations.iter().all(|&op| allowed[op].contains(&d)) {
                    continue;
                }
                if evaluations >= GUARD_MAX_EVALUATIONS {
                    break 'steps;
                }
                evaluations += 1;
                let mut trial = assign.to_vec();
                for &op in &step.operations {
                    trial[op] = d;
                }
                let trial_cost =
                    costs.cost(&trial, &steps::build_steps(costs.graph, &trial, order));
                // The compute delta is summed over the moved operations only, so that a
                // huge ratio elsewhere ("no performance information") cannot swamp it.
                let compute: f64 = step
                    .operations
                    .iter()
                    .map(|&op| costs.work[op] * (costs.ratio[op][d] - costs.ratio[op][step.device]))
                    .sum();
                let movement =
                    (trial_cost.transfer + trial_cost.launch) - (current.transfer + current.launch);
                let saving = -(compute + movement);
                if saving > 1e-9 * current.total().abs().max(1.0)
                    && best.is_none_or(|b| saving > b.0)
                {
                    best = Some((saving, s, d, compute, movement));
                }
            }
        }
        let Some((_, s, d, compute, movement)) = best else {
            return;
        };
        let step: &Step = &steps[s];
        let from = &costs.devices[step.device].name;
        let to = &costs.devices[d].name;
        let what = if step.operations.len() == 1 {
            "this operation".to_string()
        } else {
            format!("this run of {} operations", step.operations.len())
        };
        let reason = if compute > 0.0 {
            format!(
                "transfer cost guard: {from} would compute {what} {compute:.0} units cheaper, but data movement and step launches would cost {:.0} units more; runs on {to}",
                -movement
            )
        } else {
            format!(
                "transfer cost guard: moved {what} from {from} to {to} (compute {compute:+.0} units, data movement and step launches {movement:+.0} units)"
            )
        };
        for &op in &step.operations {
            assign[op] = d;
            reasons[op] = reason.clone();
        }
    }
}

/// Reorders the model so that steps are contiguous and writes the plan.
fn build_plan(
    model: &Model,
    devices: &[DeviceProfile],
    answers: &[Answer],
    options: &PartitionOptions,
    assign: &[usize],
    reasons: &[String],
    steps: &[Step],
) -> Result<(Model, ExecutionPlan), CompileError> {
    // Only the devices the plan uses, in order of first use.
    let mut used: Vec<usize> = Vec::new();
    for step in steps {
        if !used.contains(&step.device) {
            used.push(step.device);
        }
    }
    let plan_index = |d: usize| used.iter().position(|&u| u == d).unwrap_or(0) as u32;
    let mut plan_steps = steps::step_operands(model, steps);
    let order: Vec<usize> = steps.iter().flat_map(|s| s.operations.clone()).collect();
    let mut next = 0u32;
    for (plan_step, step) in plan_steps.iter_mut().zip(steps) {
        plan_step.device = plan_index(step.device);
        plan_step.operations = (next..next + step.operations.len() as u32).collect();
        next += step.operations.len() as u32;
    }
    let mut reordered = model.clone();
    reordered.main.operations = order
        .iter()
        .map(|&i| model.main.operations[i].clone())
        .collect();
    let placements = order
        .iter()
        .enumerate()
        .map(|(new, &old)| {
            let op = &model.main.operations[old];
            let answer = &answers[old];
            Placement {
                operation: new as u32,
                op_type: op.op_type.name().to_string(),
                source: op.source.clone(),
                device: plan_index(assign[old]),
                reason: reasons[old].clone(),
                declined: answer.declined.clone(),
                host_decrypted: answer.reads_encrypted_weights && devices[assign[old]].is_cpu(),
            }
        })
        .collect();
    let plan = ExecutionPlan {
        version: ExecutionPlan::VERSION,
        mode: options.mode,
        preference: options.preference,
        devices: used.iter().map(|&d| devices[d].plan_device()).collect(),
        steps: plan_steps,
        placements,
    };
    // Both checks hold by construction; a failure is a partitioner bug, reported as such.
    let internal = |m: String| CompileError::Pass {
        pass: "partition",
        message: m,
    };
    if order.len() != model.main.operations.len() {
        return Err(internal(format!(
            "the steps cover {} of {} operations",
            order.len(),
            model.main.operations.len()
        )));
    }
    plan.check(
        reordered.main.operations.len(),
        reordered.main.operands.len(),
    )
    .map_err(|e| internal(e.to_string()))?;
    validate(&reordered).map_err(|e| internal(format!("the reordered model is invalid: {e}")))?;
    Ok((reordered, plan))
}

/// The user-facing error for operations that cannot be placed: every one, with every
/// device's declining rule.
fn failure_message(
    model: &Model,
    answers: &[Answer],
    devices: &[DeviceProfile],
    options: &PartitionOptions,
    unsupported: &[usize],
    plaintext: &[usize],
) -> String {
    let total = model.main.operations.len();
    let names: Vec<&str> = devices.iter().map(|d| d.name.as_str()).collect();
    let plural = |n: usize| if n == 1 { "operation" } else { "operations" };
    let mut sections = Vec::new();
    if !unsupported.is_empty() {
        sections.push(format!(
            "strict partitioning: {} of {total} {} supported by no listed device ({}); list a device that supports {}, or allow CPU fallback:{}",
            unsupported.len(),
            if unsupported.len() == 1 { "operation is" } else { "operations are" },
            names.join(", "),
            if unsupported.len() == 1 { "it" } else { "them" },
            root_causes(answers, devices, unsupported, total)
                + &list_operations(model, answers, unsupported)
        ));
    }
    if !plaintext.is_empty() {
        let cipher = options
            .encryption
            .map(|(a, m)| format!("{a}-{m}"))
            .unwrap_or_default();
        sections.push(format!(
            "plaintext fallback refused: {} of {total} {} read weights encrypted with {cipher} that no device able to run {} decrypts itself, so they would be decrypted in host memory on the CPU; list a device that decrypts {cipher} and supports {}, or allow plaintext fallback:{}",
            plaintext.len(),
            plural(plaintext.len()),
            if plaintext.len() == 1 { "it" } else { "them" },
            if plaintext.len() == 1 { "it" } else { "them" },
            list_operations(model, answers, plaintext)
        ));
    }
    sections.join("\n")
}

/// One line per device: why it declined the operations in `which` (see
/// [`explain::root_cause`]).
fn root_causes(
    answers: &[Answer],
    devices: &[DeviceProfile],
    which: &[usize],
    total: usize,
) -> String {
    let mut out = String::new();
    for device in devices {
        let declines: Vec<&Decline> = which
            .iter()
            .flat_map(|&i| &answers[i].declined)
            .filter(|d| d.device == device.name)
            .collect();
        if let Some(line) = explain::root_cause(&device.name, &declines, total) {
            out.push_str(&format!("\n  {line}"));
        }
    }
    out
}

/// The operations of a failure message, each with every device's declining rule: the
/// first [`LISTED_OPERATIONS`], then a count.
fn list_operations(model: &Model, answers: &[Answer], which: &[usize]) -> String {
    const LISTED_OPERATIONS: usize = 10;
    let mut out = String::new();
    for &i in which.iter().take(LISTED_OPERATIONS) {
        let op = &model.main.operations[i];
        out.push_str(&format!("\n  - operation {i} {}", op.op_type));
        if !op.source.is_empty() {
            out.push_str(&format!(" (node '{}')", op.source));
        }
        if answers[i].declined.is_empty() {
            out.push_str(": cpu-only mode places it on the CPU");
        } else {
            out.push(':');
        }
        for d in &answers[i].declined {
            out.push_str(&format!("\n      {}: {}: {}", d.device, d.rule, d.detail));
        }
    }
    if which.len() > LISTED_OPERATIONS {
        out.push_str(&format!(
            "\n  - and {} more (`--partition fallback` places them on the CPU, and `nnc inspect \
             OUT.nnc --partition` then lists every operation's reasons)",
            which.len() - LISTED_OPERATIONS
        ));
    }
    out
}
