//! Reference vectors from TensorFlow Lite 2.21's reference interpreter
//! (`tf.lite.Interpreter` with `OpResolverType.BUILTIN_REF`, one thread): single-operation
//! models built with random quantization parameters, inputs and weights, run once, the
//! outputs recorded. Each case is replayed here as the equivalent NN operation and must
//! match bit for bit. They pin down the places where TFLite's arithmetic is subtle:
//! SOFTMAX's gemmlowp fixed point, HARD_SWISH's 16-bit fixed point, L2_NORMALIZATION's
//! inverse square root, the float tables of LOGISTIC/TANH, the integer and float
//! bilinear resizes, MEAN's folded divisor, FULLY_CONNECTED's single rounding (ruy),
//! the float-product multipliers of uint8 convolutions, and multipliers close to 1 where
//! double and single rounding differ most often.
//!
//! Format, one case per `case` .. `end` block: `arg input|const TYPE DIMS SCALE:ZP
//! VALUES`, `arg i32|f32|bool VALUE`, `out TYPE DIMS SCALE:ZP EXPECTED`; per-channel
//! filters give `pc:DIM:S0;S1;..` instead of `SCALE:ZP`; DIMS `-` is a scalar.

mod quant_common;

use nnc_formats::nn::{Operand, OperandType, OperationType};
use quant_common::*;

fn operand_type(s: &str) -> OperandType {
    match s {
        "TQ8A" => OperandType::TensorQuant8Asymm,
        "TQ8AS" => OperandType::TensorQuant8AsymmSigned,
        "TQ8SC" => OperandType::TensorQuant8SymmPerChannel,
        "TI32" => OperandType::TensorInt32,
        "TF32" => OperandType::TensorFloat32,
        "TBOOL" => OperandType::TensorBool8,
        other => panic!("unknown type {other}"),
    }
}

fn operand(ty: &str, dims: &str, quant: &str) -> Operand {
    let ty = operand_type(ty);
    let dims: Vec<usize> = if dims == "-" {
        vec![]
    } else {
        dims.split(',').map(|d| d.parse().unwrap()).collect()
    };
    if let Some(rest) = quant.strip_prefix("pc:") {
        let (dim, scales) = rest.split_once(':').unwrap();
        let scales = scales
            .split(';')
            .map(|s| s.parse::<f64>().unwrap() as f32)
            .collect();
        return per_channel(&dims, dim.parse().unwrap(), scales);
    }
    let (scale, zp) = quant.split_once(':').unwrap();
    qoperand(
        ty,
        &dims,
        scale.parse::<f64>().unwrap() as f32,
        zp.parse().unwrap(),
    )
}

fn values(ty: OperandType, vals: &[&str]) -> Vec<u8> {
    match ty {
        OperandType::TensorInt32 => vals
            .iter()
            .flat_map(|v| v.parse::<i32>().unwrap().to_le_bytes())
            .collect(),
        OperandType::TensorFloat32 => vals
            .iter()
            .flat_map(|v| (v.parse::<f64>().unwrap() as f32).to_le_bytes())
            .collect(),
        _ => vals
            .iter()
            .map(|v| v.parse::<i32>().unwrap() as u8)
            .collect(),
    }
}

#[test]
fn tflite_reference_vectors_match_bit_for_bit() {
    let mut lines = VECTORS.lines();
    let mut cases = 0;
    while let Some(line) = lines.next() {
        let Some(name) = line.strip_prefix("case ") else {
            continue;
        };
        let op_name = lines
            .next()
            .and_then(|l| l.strip_prefix("op "))
            .expect("op line");
        let op = OperationType::from_name(op_name).expect("operation");
        let mut args = Vec::new();
        let mut expected = None;
        for line in lines.by_ref() {
            if line == "end" {
                break;
            }
            let f: Vec<&str> = line.split(' ').collect();
            match (f[0], f[1]) {
                ("arg", "input") | ("arg", "const") => {
                    let o = operand(f[2], f[3], f[4]);
                    let data = values(o.operand_type, &f[5..]);
                    args.push(if f[1] == "input" {
                        input(o, data)
                    } else {
                        constant(o, data)
                    });
                }
                ("arg", "i32") => args.push(QArg::I32(f[2].parse().unwrap())),
                ("arg", "f32") => args.push(QArg::F32(f[2].parse::<f64>().unwrap() as f32)),
                ("arg", "bool") => args.push(QArg::Bool(f[2] != "0")),
                ("out", _) => {
                    let o = operand(f[1], f[2], f[3]);
                    let data = values(o.operand_type, &f[4..]);
                    expected = Some((o, data));
                }
                _ => panic!("{name}: cannot read {line}"),
            }
        }
        let (o, want) = expected.expect("out line");
        let got = run_q(op, args, std::slice::from_ref(&o))
            .unwrap_or_else(|e| panic!("{name} ({op_name}): {e}"));
        assert_eq!(got[0].data, want, "{name} ({op_name})");
        cases += 1;
    }
    assert!(cases >= 80, "only {cases} cases read");
}

const VECTORS: &str = r#"
case softmax_softmax
op SOFTMAX
arg input TQ8AS 1,1 0.20841380953788757:-6 -88
arg f32 0.5411190390586853
out TQ8AS 1,1 0.00390625:-128 127
end
case softmax_softmax
op SOFTMAX
arg input TQ8AS 1,3 0.6376465559005737:-8 116 61 97
arg f32 0.5
out TQ8AS 1,3 0.00390625:-128 127 -128 -127
end
case softmax_softmax
op SOFTMAX
arg input TQ8A 1,6 0.2590511739253998:225 92 237 7 75 142 131
arg f32 1.0
out TQ8A 1,6 0.00390625:0 0 255 0 0 0 0
end
case softmax_softmax
op SOFTMAX
arg input TQ8AS 1,4 0.01802823506295681:-42 115 -17 -83 90
arg f32 1.0
out TQ8AS 1,4 0.00390625:-128 18 -115 -124 -35
end
case softmax_softmax
op SOFTMAX
arg input TQ8A 3,2 0.01895524561405182:93 240 84 128 11 163 53
arg f32 1.7715011835098267
out TQ8A 3,2 0.00390625:0 255 1 251 5 250 6
end
case softmax_softmax
op SOFTMAX
arg input TQ8A 3,3 0.21575507521629333:128 1 209 183 139 144 235 187 214 216
arg f32 0.5
out TQ8A 3,3 0.00390625:0 0 241 15 0 0 255 6 112 138
end
case hard_swish_hard_swish
op HARD_SWISH
arg input TQ8AS 1 0.7755122780799866:17 49
out TQ8AS 1 0.11348695307970047:30 127
end
case hard_swish_hard_swish
op HARD_SWISH
arg input TQ8AS 1 0.01827932894229889:-6 47
out TQ8AS 1 1.8160130977630615:127 127
end
case hard_swish_hard_swish
op HARD_SWISH
arg input TQ8AS 1 0.0390830896794796:97 4
out TQ8AS 1 0.8374057412147522:-128 -128
end
case hard_swish_hard_swish
op HARD_SWISH
arg input TQ8A 1,2 0.05925247445702553:2 254 101
out TQ8A 1,2 0.21702201664447784:0 69 27
end
case hard_swish_hard_swish
op HARD_SWISH
arg input TQ8A 1,2 1.0291177034378052:14 44 177
out TQ8A 1,2 0.010499373078346252:103 255 255
end
case hard_swish_hard_swish
op HARD_SWISH
arg input TQ8A 1,2,1 1.104042649269104:205 102 230
out TQ8A 1,2,1 0.027977490797638893:234 234 255
end
case l2_normalization_l2norm
op L2_NORMALIZATION
arg input TQ8A 1,2 0.18303799629211426:148 38 32
out TQ8A 1,2 0.0078125:128 40 35
end
case l2_normalization_l2norm
op L2_NORMALIZATION
arg input TQ8A 3,1 0.5978624224662781:255 0 218 62
out TQ8A 3,1 0.0078125:128 0 0 0
end
case l2_normalization_l2norm
op L2_NORMALIZATION
arg input TQ8AS 1,2 0.20387360453605652:-9 -14 49
out TQ8AS 1,2 0.0078125:0 -11 127
end
case l2_normalization_l2norm
op L2_NORMALIZATION
arg input TQ8AS 1,2 0.4811011552810669:-81 -83 -48
out TQ8AS 1,2 0.0078125:0 -8 127
end
case logistic_logistic
op LOGISTIC
arg input TQ8A 1 0.27006053924560547:235 12
out TQ8A 1 0.00390625:0 0
end
case logistic_logistic
op LOGISTIC
arg input TQ8A 1 1.0678914785385132:244 137
out TQ8A 1 0.00390625:0 0
end
case logistic_logistic
op LOGISTIC
arg input TQ8AS 2 0.7562493681907654:118 97 25
out TQ8AS 2 0.00390625:-128 -128 -128
end
case tanh_tanh
op TANH
arg input TQ8A 1 0.1910439282655716:74 0
out TQ8A 1 0.0078125:128 0
end
case tanh_tanh
op TANH
arg input TQ8A 1 0.025994107127189636:155 57
out TQ8A 1 0.0078125:128 2
end
case tanh_tanh
op TANH
arg input TQ8AS 1 0.3887931704521179:8 -58
out TQ8AS 1 0.0078125:0 -128
end
case resize_bilinear_resize_bilinear
op RESIZE_BILINEAR
arg input TQ8AS 1,3,3,1 0.2945336699485779:-128 -15 -11 25 96 105 -70 -121 -119 62
arg i32 3
arg i32 1
arg bool 0
arg bool 0
arg bool 0
out TQ8AS 1,1,3,1 0.2945336699485779:-128 -15 -11 25
end
case resize_bilinear_resize_bilinear
op RESIZE_BILINEAR
arg input TQ8A 1,6,2,1 0.5449625849723816:0 149 109 26 112 214 117 136 104 75 154 255 68
arg i32 1
arg i32 5
arg bool 0
arg bool 1
arg bool 0
out TQ8A 1,5,1,1 0.5449625849723816:0 149 73 175 90 255
end
case resize_bilinear_resize_bilinear
op RESIZE_BILINEAR
arg input TQ8AS 1,3,2,1 0.15608587861061096:-48 -74 -37 -54 -47 -93 15
arg i32 9
arg i32 1
arg bool 0
arg bool 0
arg bool 0
out TQ8AS 1,1,9,1 0.15608587861061096:-48 -74 -66 -58 -49 -41 -37 -37 -37 -37
end
case resize_bilinear_resize_bilinear
op RESIZE_BILINEAR
arg input TQ8AS 1,3,2,1 0.03565323352813721:-75 122 -94 -52 19 -32 -80
arg i32 1
arg i32 10
arg bool 0
arg bool 1
arg bool 0
out TQ8AS 1,10,1,1 0.03565323352813721:-75 122 83 45 6 -33 -50 -45 -41 -36 -32
end
case resize_bilinear_resize_bilinear
op RESIZE_BILINEAR
arg input TQ8A 1,3,4,1 0.30504706501960754:0 207 8 55 214 214 58 232 103 105 73 65 27
arg i32 11
arg i32 2
arg bool 0
arg bool 1
arg bool 0
out TQ8A 1,2,11,1 0.30504706501960754:0 207 147 88 28 17 32 46 71 119 166 214 105 95 86 76 71 69 67 61 50 38 27
end
case resize_bilinear_resize_bilinear
op RESIZE_BILINEAR
arg input TQ8A 1,2,2,2 0.2215777188539505:6 237 203 243 63 100 181 242 183
arg i32 4
arg i32 3
arg bool 0
arg bool 0
arg bool 0
out TQ8A 1,3,4,2 0.2215777188539505:6 237 203 240 133 243 63 243 63 146 188 194 166 242 143 242 143 100 181 171 182 242 183 242 183
end
case mean_mean
op MEAN
arg input TQ8A 2 0.596215546131134:148 29 104
arg const TI32 1 0.0:0 0
arg i32 1
out TQ8A 1 0.017474917694926262:76 0
end
case mean_mean
op MEAN
arg input TQ8A 3 0.8820120692253113:56 8 241 204
arg const TI32 1 0.0:0 0
arg i32 0
out TQ8A - 0.6985892653465271:3 123
end
case mean_mean
op MEAN
arg input TQ8AS 1 0.02057083696126938:-85 67
arg const TI32 1 0.0:0 0
arg i32 0
out TQ8AS - 0.044528715312480927:-104 -34
end
case mean_mean
op MEAN
arg input TQ8AS 2 0.6471932530403137:127 53 -6
arg const TI32 1 0.0:0 0
arg i32 0
out TQ8AS - 0.04441174492239952:-96 -128
end
case fully_connected_fc
op FULLY_CONNECTED
arg input TQ8AS 1,1 0.23354464769363403:-51 -72
arg const TQ8AS 12,1 0.0491926334798336:0 33 35 -33 48 -54 58 -42 67 -8 -83 125 -104
arg const TI32 12 0.0:0 109 1233 -2958 742 -676 -599 1799 -2215 -920 -2883 706 -447
arg i32 0
out TQ8AS 1,12 1.041654109954834:-66 -72 -61 -91 -69 -61 -86 -36 -106 -74 -79 -87 -47
end
case fully_connected_fc
op FULLY_CONNECTED
arg input TQ8A 1,1 0.03880868852138519:203 187
arg const TQ8A 21,1 0.047860581427812576:179 181 165 191 203 9 208 233 110 69 100 203 217 199 99 146 181 75 251 1 112 140
arg const TI32 21 0.0:0 2464 -2182 1752 -737 -2950 -215 -349 -1239 306 -2410 2006 2888 -499 -2400 2066 1247 84 -1330 2803 1175 2318
arg i32 3
out TQ8A 1,21 0.04676477983593941:189 255 189 251 189 189 189 189 189 255 189 253 255 189 189 255 237 255 189 255 255 255
end
case fully_connected_big_fc
op FULLY_CONNECTED
arg input TQ8AS 3,5 0.08067204058170319:67 -11 -19 -115 -17 83 -112 44 68 -117 -73 22 96 -22 -50 83
arg const TQ8AS 2,5 0.06025944650173187:0 -1 0 -3 -6 3 -3 0 1 5 3
arg const TI32 2 0.0:0 -1892 2767
arg i32 3
out TQ8AS 3,2 0.015736054629087448:103 103 127 103 127 103 127
end
case fully_connected_big_fc
op FULLY_CONNECTED
arg input TQ8A 3,13 0.03721228614449501:106 135 168 49 80 238 56 248 98 131 9 82 96 211 187 148 157 160 104 162 210 33 48 84 154 170 63 148 199 76 88 62 201 53 71 165 120 227 226 43
arg const TQ8A 1,13 0.02518516592681408:136 129 135 127 140 130 134 134 134 136 143 132 138 138
arg const TI32 1 0.0:0 1474
arg i32 2
out TQ8A 3,1 0.0028793816454708576:98 184 149 255
end
case fully_connected_big_fc
op FULLY_CONNECTED
arg input TQ8A 2,12 0.14980246126651764:57 158 24 102 221 127 229 215 208 207 192 111 98 66 14 169 248 81 225 187 126 146 171 43 182
arg const TQ8A 2,12 0.019781142473220825:107 102 110 110 107 113 101 106 102 102 114 102 107 114 109 103 108 107 113 107 102 106 103 109 106
arg const TI32 2 0.0:0 1594 532
arg i32 1
out TQ8A 2,2 0.0061400411650538445:13 13 255 255 118
end
case fully_connected_big_fc
op FULLY_CONNECTED
arg input TQ8AS 1,6 0.573106586933136:91 -126 -9 62 -8 -82 -47
arg const TQ8AS 9,6 0.00869727786630392:0 1 6 -3 -5 4 -2 -5 -3 6 3 -5 6 0 4 5 1 -6 -5 1 7 -1 1 -4 6 -2 1 -5 6 -8 2 3 -6 0 -8 -4 2 2 -3 -2 4 -4 -5 -6 -8 2 -7 0 3 -2 -6 5 7 -6 -8
arg const TI32 9 0.0:0 2671 783 1572 1375 -2490 -2652 -2948 2703 88
arg i32 3
out TQ8AS 1,9 0.013076374307274818:-18 127 127 127 78 -18 -18 -18 127 127
end
case fully_connected_pc_fc
op FULLY_CONNECTED
arg input TQ8AS 2,6 0.6055760383605957:-84 -9 -76 83 39 96 23 -75 18 14 -98 -126 40
arg const TQ8SC 8,6 pc:0:0.02398029714822769;0.009111926890909672;0.002248029690235853;0.022587914019823074;0.005720612592995167;0.004191962070763111;0.003098034765571356;0.0035302964970469475 -3 -6 -2 -4 7 7 7 -3 6 -7 5 -4 7 3 -1 -5 2 7 -5 0 2 -4 -7 5 -2 -2 6 2 3 -1 3 5 2 2 -8 7 6 -6 -6 -7 2 1 5 -8 -4 3 -5 -1
arg const TI32 8 0.0:0 -1999 1945 1225 -2267 -1175 938 -1523 1217
arg i32 0
out TQ8AS 2,8 0.015603265725076199:45 -128 127 127 -128 120 127 -128 75 -128 127 127 -128 -128 127 -128 58
end
case fully_connected_pc_fc
op FULLY_CONNECTED
arg input TQ8AS 3,36 0.15926676988601685:-128 -16 120 46 62 25 -67 25 107 99 15 -51 72 71 45 -124 84 23 46 -76 -112 61 -112 65 -54 113 -6 -78 86 -22 21 29 23 -78 43 -15 -40 92 -5 -112 -119 77 -16 -62 -1 32 29 78 -87 115 117 -71 -14 -12 -39 -76 33 121 46 30 70 -67 126 -58 125 -52 121 -102 -78 100 77 53 100 74 -32 -123 -101 123 -45 49 69 96 -16 -54 100 -25 107 -117 -92 -118 62 -127 10 -94 38 44 -92 -72 -17 94 -105 -111 -95 -62 84 18 -111 115 -89
arg const TQ8SC 2,36 pc:0:0.03168930485844612;0.007590070832520723 -4 -6 0 -6 3 -3 -7 4 -1 7 2 0 -2 4 3 -2 0 5 -2 -4 4 2 -7 -1 6 0 7 -5 -6 -3 -8 3 5 7 -2 -2 -2 4 1 3 -3 3 -4 2 -1 3 -8 -1 -4 -4 2 2 4 -5 0 5 -7 5 2 -5 -4 6 7 -4 4 -5 -1 7 -7 0 -2 -8
arg const TI32 2 0.0:0 1943 588
arg i32 0
out TQ8AS 3,2 0.011347446590662003:127 26 -128 127 -128 127 107
end
case fully_connected_pc_fc
op FULLY_CONNECTED
arg input TQ8A 3,3 0.01812945492565632:255 87 4 158 237 43 207 191 157 110
arg const TQ8A 29,3 0.010226838290691376:32 41 31 39 39 41 38 42 39 31 31 44 30 45 45 44 30 31 44 33 43 31 34 37 45 45 42 30 30 36 40 31 44 44 30 40 37 34 45 41 41 35 32 41 39 37 44 40 44 30 44 38 42 40 44 35 39 39 33 32 40 40 30 43 38 33 43 35 38 40 45 38 45 42 30 44 35 36 43 41 36 30 38 32 32 34 43 42
arg const TI32 29 0.0:0 1844 1350 671 -627 26 1499 2716 154 -1567 -372 2100 -2868 -2403 -2157 -1118 -2314 -2139 -1502 194 762 -1225 -2114 2862 -1182 -2105 -2804 2669 -93 -2146
arg i32 3
out TQ8A 3,29 0.00043289968743920326:122 122 122 122 122 122 255 122 122 122 122 122 122 122 122 122 122 122 122 122 122 122 122 155 122 122 122 255 122 122 255 122 122 122 122 255 255 122 122 122 122 122 122 122 122 122 122 122 122 255 122 122 255 122 122 122 255 122 122 255 122 122 122 122 122 255 122 122 122 122 122 122 122 122 122 122 122 122 122 122 122 255 122 122 122 255 122 122
end
case conv_2d_big_conv
op CONV_2D
arg input TQ8AS 1,4,5,1 0.11095662415027618:-128 21 18 -47 -97 121 122 -27 71 -123 86 -6 -66 72 45 104 -105 0 78 102 -73
arg const TQ8SC 4,2,1,1 pc:0:0.061493709683418274;0.037935610860586166;0.009348079562187195;0.001983001595363021 -3 0 -1 2 -4 -5 -2 6
arg const TI32 4 0.0:0 2435 37 -1469 1565
arg i32 1
arg i32 2
arg i32 2
arg i32 3
arg bool 0
arg i32 1
arg i32 1
out TQ8AS 1,2,3,4 0.01375697460025549:-67 127 52 -67 -23 127 42 -67 -25 127 -1 -67 -29 127 -67 -67 -44 127 9 -67 -29 127 -67 -67 -44
end
case conv_2d_big_conv
op CONV_2D
arg input TQ8A 1,5,3,1 0.030092353001236916:141 28 142 61 27 161 252 181 111 13 37 25 54 169 46 176
arg const TQ8A 7,3,1,1 0.011979810893535614:186 178 178 186 187 187 186 186 176 184 185 183 182 188 174 189 189 187 182 187 188 178
arg const TI32 7 0.0:0 2711 -2971 -478 2806 1624 -1778 1938
arg i32 2
arg i32 1
arg i32 1
arg i32 2
arg bool 0
arg i32 1
arg i32 1
out TQ8A 1,3,3,7 0.0010878624161705375:0 255 0 193 255 255 0 255 255 0 0 255 255 0 255 255 0 0 255 0 0 255 255 0 0 255 200 0 255 255 0 18 255 255 0 255 255 0 255 255 255 0 255 255 0 168 255 255 0 255 255 0 255 255 255 0 255 255 0 107 255 255 0 255
end
case conv_2d_big_conv
op CONV_2D
arg input TQ8A 2,7,3,2 0.11078435927629471:226 252 234 181 251 173 252 52 28 25 135 216 21 73 32 94 129 38 207 204 110 248 136 211 27 195 37 151 248 118 135 90 116 199 173 171 111 179 191 190 70 150 255 141 243 125 76 36 188 229 144 148 144 211 80 66 12 128 16 173 6 217 67 111 133 9 185 98 251 48 124 166 135 1 24 204 128 201 206 160 191 63 96 157 187
arg const TQ8A 2,3,3,2 0.004110392183065414:0 14 3 3 10 11 10 5 1 9 12 7 8 3 2 15 13 5 12 6 6 15 11 15 9 1 5 14 11 14 15 6 13 12 9 10 0
arg const TI32 2 0.0:0 2483 5
arg i32 1
arg i32 1
arg i32 2
arg i32 0
arg bool 0
arg i32 2
arg i32 2
out TQ8A 2,4,3,2 0.0012321227695792913:129 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 233 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0
end
case depthwise_conv_2d_big_depthwise
op DEPTHWISE_CONV_2D
arg input TQ8AS 1,7,3,1 0.06737957894802094:-60 -126 114 -7 24 -105 109 -26 -108 -15 0 12 -71 -93 80 121 -104 -124 10 -104 102 -90
arg const TQ8SC 1,2,3,2 pc:3:0.006816766690462828;0.009867840446531773 -6 6 -4 -1 5 -4 5 4 -8 -7 -3 -4
arg const TI32 2 0.0:0 -1043 -2772
arg i32 2
arg i32 2
arg i32 2
arg i32 2
arg i32 2
arg bool 0
arg i32 1
arg i32 1
out TQ8AS 1,3,1,2 0.0013538171770051122:118 -128 -128 -128 -128 -24 -128
end
case depthwise_conv_2d_big_depthwise
op DEPTHWISE_CONV_2D
arg input TQ8A 1,5,3,3 0.14069925248622894:51 234 15 126 4 98 238 76 85 20 225 10 160 158 235 254 137 85 167 11 32 24 190 248 83 188 20 183 16 248 249 33 235 162 181 28 228 228 0 153 57 205 115 17 27 216
arg const TQ8A 1,3,1,3 0.003254122333601117:0 7 1 7 2 7 9 0 7 7
arg const TI32 3 0.0:0 -1133 1298 -1051
arg i32 1
arg i32 1
arg i32 2
arg i32 1
arg i32 2
arg bool 0
arg i32 2
arg i32 2
out TQ8A 1,3,3,3 0.0011142328148707747:171 0 255 0 0 255 255 0 255 4 199 255 148 0 255 255 0 255 255 0 255 38 110 255 68 71 255 255
end
case depthwise_conv_2d_big_depthwise
op DEPTHWISE_CONV_2D
arg input TQ8AS 1,3,3,9 0.05501312389969826:-128 48 -27 -33 -123 -88 -3 44 17 -53 -19 17 -22 92 -40 85 35 120 116 -5 14 95 -37 -112 74 -28 -71 63 75 -125 11 -49 -37 -13 79 -17 -108 -74 -69 48 29 -117 -51 44 -22 121 -112 -88 83 21 69 -125 -74 -107 37 -68 -78 -59 34 67 -122 -125 -76 -48 -92 125 -89 113 105 14 -79 44 14 112 97 34 -45 -56 -1 -70 5 108
arg const TQ8SC 1,3,3,9 pc:3:0.004922194872051477;0.020435746759176254;0.003022734308615327;0.0028497232124209404;0.005500113591551781;0.002545511582866311;0.006895589176565409;0.014589637517929077;0.0028492349665611982 4 6 -1 -8 -7 0 -6 -2 6 2 1 5 0 -3 1 1 -5 0 2 -1 -4 2 -6 -3 6 6 -3 -1 -4 0 5 3 4 -5 -4 -5 6 -7 2 1 -4 5 -3 -3 4 1 5 0 3 -2 -7 1 -8 -5 -5 -7 6 3 -8 2 0 -4 -4 6 -6 -4 -4 -3 4 -5 -6 0 0 1 7 -7 1 -5 3 -2 2
arg const TI32 9 0.0:0 152 -604 1706 1426 2267 -1714 1653 -2514 -992
arg i32 2
arg i32 1
arg i32 2
arg i32 1
arg i32 1
arg bool 0
arg i32 1
arg i32 1
out TQ8AS 1,1,1,9 0.0005987909971736372:-9 127 -9 127 127 -9 -9 -9 -9 -9
end
case transpose_conv_2d_big_tconv
op TRANSPOSE_CONV_2D
arg input TQ8AS 1,1,2,3 0.8359952569007874:-128 -60 -17 26 119 54 -90
arg const TQ8SC 2,2,1,3 pc:0:0.06219865009188652;0.01686667650938034 1 0 2 -4 -1 -5 -4 7 -5 0 -5 5
arg const TI32 2 0.0:0 157 -910
arg const TI32 4 0.0:0 1 1 4 2
arg i32 1
arg i32 2
arg i32 1
arg i32 0
arg bool 0
out TQ8AS 1,1,4,2 0.13359414041042328:-2 127 -126 59 -98 127 -88 59 -98
end
case transpose_conv_2d_big_tconv
op TRANSPOSE_CONV_2D
arg input TQ8A 1,1,2,3 0.5225846171379089:76 122 230 1 245 43 255
arg const TQ8A 3,1,3,3 0.024214958772063255:0 5 7 0 7 13 1 4 2 7 3 8 11 9 8 13 15 9 0 6 6 13 7 3 9 7 1 14
arg const TI32 3 0.0:0 -1742 -2328 -2182
arg const TI32 4 0.0:0 1 1 4 3
arg i32 1
arg i32 2
arg i32 1
arg i32 0
arg bool 0
out TQ8A 1,1,4,3 0.025774721056222916:53 0 0 0 255 0 0 0 255 243 0 255 255
end
case batch_matmul_big_bmm
op BATCH_MATMUL
arg input TQ8AS 1,1,1 0.05289950966835022:-50 7
arg input TQ8AS 1,1,5 0.22506093978881836:-40 -6 -13 -3 -6 -9
arg bool 1
arg bool 0
out TQ8AS 1,1,5 0.03033602237701416:-99 127 127 127 127 127
end
case batch_matmul_big_bmm
op BATCH_MATMUL
arg input TQ8AS 1,4,1 0.26040753722190857:127 -7 7 -13 -7
arg input TQ8AS 1,4,3 0.044332969933748245:102 10 -8 -1 -12 -11 -16 -14 -12 -15 -16 -4 14
arg bool 1
arg bool 0
out TQ8AS 1,1,3 0.027878079563379288:-39 127 127 127
end
case add_add
op ADD
arg input TQ8AS 1 0.008094869554042816:81 49
arg input TQ8AS 1 0.10914359241724014:53 -15
arg i32 0
out TQ8AS 1 1.9106134176254272:13 9
end
case add_add
op ADD
arg input TQ8AS 1 1.0281169414520264:-4 -65
arg input TQ8AS 1 0.02098609134554863:-26 43
arg i32 1
out TQ8AS 1 0.01171841286122799:35 35
end
case add_add
op ADD
arg input TQ8A 1 0.7032405734062195:216 18
arg input TQ8A 2 1.5284054279327393:133 41 34
arg i32 3
out TQ8A 2 0.09620308130979538:245 245 245
end
case sub_sub
op SUB
arg input TQ8AS 1 0.045398954302072525:92 -6
arg input TQ8AS 1 0.12769919633865356:79 -26
arg i32 0
out TQ8AS 1 1.164600133895874:-5 3
end
case sub_sub
op SUB
arg input TQ8A 1 0.043838705867528915:228 125
arg input TQ8A 1 0.11153939366340637:25 105
arg i32 1
out TQ8A 1 0.0437249094247818:162 162
end
case mul_mul
op MUL
arg input TQ8A 1 0.02392742410302162:159 2
arg input TQ8A 1 0.056170668452978134:73 173
arg i32 0
out TQ8A 1 0.03502828627824783:33 0
end
case mul_mul
op MUL
arg input TQ8AS 1 0.0861029103398323:111 -107
arg input TQ8AS 1 0.013398299925029278:-35 -107
arg i32 1
out TQ8AS 1 1.2068907022476196:-96 -81
end
case mul_mul
op MUL
arg input TQ8A 2 1.7179787158966064:89 107 58
arg input TQ8A 1 1.4379383325576782:115 161
arg i32 1
out TQ8A 2 0.38251984119415283:162 255 162
end
case average_pool_2d_average_pool_2d
op AVERAGE_POOL_2D
arg input TQ8AS 1,4,2,1 0.26277175545692444:69 121 -48 32 -126 5 -96 73 49
arg i32 1
arg i32 2
arg i32 2
arg i32 1
arg i32 3
arg i32 3
out TQ8AS 1,2,1,1 0.26277175545692444:69 69 69
end
case average_pool_2d_average_pool_2d
op AVERAGE_POOL_2D
arg input TQ8A 1,2,2,3 0.1140245646238327:56 235 129 253 152 71 215 26 179 252 236 100 129
arg i32 1
arg i32 2
arg i32 2
arg i32 2
arg i32 2
arg i32 1
out TQ8A 1,1,1,3 0.1140245646238327:56 162 120 212
end
case prelu_prelu
op PRELU
arg input TQ8AS 1,1,1,1 0.0895979031920433:-128 27
arg const TQ8AS 1,1,1 0.00499754911288619:-109 -13
out TQ8AS 1,1,1,1 0.016373414546251297:44 127
end
case prelu_prelu
op PRELU
arg input TQ8A 1,1,1,3 0.19417093694210052:245 66 251 172
arg const TQ8A 1,1,3 0.242538183927536:74 93 184 140
out TQ8A 1,1,1,3 0.14987456798553467:226 0 234 0
end
case concatenation_concat
op CONCATENATION
arg input TQ8AS 1 0.201860710978508:98 100
arg input TQ8AS 2 0.201860710978508:98 101 6
arg i32 0
out TQ8AS 3 0.201860710978508:98 100 101 6
end
case concatenation_concat
op CONCATENATION
arg input TQ8A 3 0.9800129532814026:0 255 10 25
arg input TQ8A 1 0.06577057391405106:28 99
arg i32 0
out TQ8A 4 0.3579084277153015:83 255 110 151 96
end
case quantize_quantize
op QUANTIZE
arg input TF32 1,1 0.0:0 -3.501664400100708
out TQ8A 1,1 0.1077435165643692:181 148
end
case quantize_quantize
op QUANTIZE
arg input TF32 1,1 0.0:0 -1.1030967235565186
out TQ8A 1,1 0.16970719397068024:48 41
end
case quantize_quantize
op QUANTIZE
arg input TQ8AS 1,2 0.6725929379463196:84 -119 88
out TQ8AS 1,2 0.3921559453010559:97 -128 104
end
case resize_nearest_neighbor_resize_nearest_neighbor
op RESIZE_NEAREST_NEIGHBOR
arg input TQ8A 1,1,1,1 0.41818130016326904:0 26
arg i32 10
arg i32 1
arg bool 0
arg bool 0
arg bool 0
out TQ8A 1,1,10,1 0.41818130016326904:0 26 26 26 26 26 26 26 26 26 26
end
case resize_nearest_neighbor_resize_nearest_neighbor
op RESIZE_NEAREST_NEIGHBOR
arg input TQ8AS 1,2,4,1 0.02507670409977436:-126 39 113 74 114 60 -77 -106 106
arg i32 2
arg i32 3
arg bool 0
arg bool 0
arg bool 0
out TQ8AS 1,3,2,1 0.02507670409977436:-126 39 74 39 74 60 -106
end
case less_less
op LESS
arg input TQ8AS 1,1 0.5218226313591003:21 -55
arg input TQ8AS 1,1 0.1678629070520401:-22 -48
out TBOOL 1,1 0.0:0 1
end
case less_less
op LESS
arg input TQ8A 1,1 0.08194636553525925:80 32
arg input TQ8A 1,2 0.08478376269340515:27 47 200
out TBOOL 1,2 0.0:0 1 1
end
case relu6_relu6
op RELU6
arg input TQ8A 1,1 0.5141398310661316:37 157
out TQ8A 1,1 0.36243975162506104:131 148
end
case relu6_relu6
op RELU6
arg input TQ8AS 1 1.6767628192901611:-128 -72
out TQ8AS 1 0.017702436074614525:-116 127
end
case reduce_max_reduce_max
op REDUCE_MAX
arg input TQ8A 1 0.06287430971860886:133 97
arg const TI32 1 0.0:0 0
arg bool 0
out TQ8A - 0.06287430971860886:133 97
end
case max_pool_2d_max_pool_2d
op MAX_POOL_2D
arg input TQ8A 1,3,2,1 0.024834515526890755:94 136 54 38 189 92 61
arg i32 2
arg i32 2
arg i32 2
arg i32 1
arg i32 2
arg i32 0
out TQ8A 1,1,1,1 0.024834515526890755:94 136
end
case dequantize_dequantize
op DEQUANTIZE
arg input TQ8AS 1,1 0.47407442331314087:112 -57
out TF32 1,1 0.0:0 -80.11857604980469
end
case argmax_argmax
op ARGMAX
arg input TQ8AS 1 0.9907979965209961:-77 0
arg i32 0
out TI32 1 0.0:0 0
end
case maximum_maximum
op MAXIMUM
arg input TQ8A 1 1.8646318912506104:0 24
arg input TQ8A 1 1.8646318912506104:0 61
out TQ8A 1 1.8646318912506104:0 61
end
case conv_2d_conv
op CONV_2D
arg input TQ8AS 1,5,8,1 0.016325030475854874:-34 -39 -98 -4 -79 -16 70 -115 100 -112 -31 93 -115 -81 -69 -6 53 -98 -41 -120 -44 -112 -95 115 90 16 85 -65 -17 -98 -49 -113 10 -56 57 -60 77 -103 56 12 -22
arg const TQ8SC 3,2,1,1 pc:0:0.00767355365678668;0.0036240641493350267;0.006379551719874144 60 -57 -70 -82 -117 22
arg const TI32 3 0.0:0 -533 -2096 -213
arg i32 1
arg i32 2
arg i32 2
arg i32 3
arg bool 0
arg i32 1
arg i32 1
out TQ8AS 1,3,4,3 0.5708692073822021:-128 -127 -128 -128 -128 -128 -128 -127 -128 -128 -128 -128 -126 -128 -128 -126 -128 -127 -126 -128 -127 -127 -125 -128 -128 -128 -128 -128 -128 -128 -127 -128 -128 -127 -128 -128 -128
end
case conv_2d_conv
op CONV_2D
arg input TQ8A 1,8,8,2 0.08415122330188751:221 219 91 246 171 151 20 117 161 49 150 125 189 118 200 15 216 29 92 140 214 193 161 13 212 166 158 45 213 82 87 189 91 164 5 108 186 57 224 18 58 157 18 105 144 203 164 112 6 224 165 234 164 16 153 80 223 7 255 51 29 83 18 3 171 151 135 115 205 185 78 77 212 84 253 13 3 225 56 117 77 40 187 119 221 242 134 48 179 220 68 27 250 208 157 217 164 72 56 116 50 202 150 88 137 220 55 181 37 29 156 215 191 4 174 35 43 135 251 208 202 131 23 169 230 196 16 55 226
arg const TQ8A 1,3,3,2 0.049970515072345734:151 24 165 210 38 157 83 80 228 29 132 29 243 95 231 11 19 218 247
arg const TI32 1 0.0:0 -2383
arg i32 2
arg i32 1
arg i32 1
arg i32 2
arg bool 0
arg i32 1
arg i32 1
out TQ8A 1,6,6,1 0.254659503698349:195 199 199 199 199 199 199 199 199 199 199 199 199 199 199 199 199 199 199 199 199 199 199 199 199 199 199 191 199 199 199 199 199 191 199 191 199
end
case depthwise_conv_2d_depthwise
op DEPTHWISE_CONV_2D
arg input TQ8AS 1,3,5,2 0.05545305088162422:78 71 -104 109 93 -76 99 -15 89 108 89 -36 -85 8 77 123 44 -22 121 -14 -54 99 5 121 88 6 -16 101 116 60 8
arg const TQ8SC 1,1,3,6 pc:3:0.0030977874994277954;0.031593408435583115;0.06253219395875931;0.022883523255586624;0.005560834426432848;0.003582156728953123 -48 102 26 -114 10 0 19 -110 105 59 -83 -81 -93 103 -30 108 -126 64
arg const TI32 6 0.0:0 -1033 473 -742 1276 -2819 -245
arg i32 2
arg i32 1
arg i32 2
arg i32 3
arg i32 0
arg bool 0
arg i32 2
arg i32 1
out TQ8AS 1,2,1,6 0.036426663398742676:127 97 127 -128 127 61 120 119 127 -128 5 127 127
end
case depthwise_conv_2d_depthwise
op DEPTHWISE_CONV_2D
arg input TQ8A 1,3,3,8 0.27076053619384766:37 106 241 116 169 9 129 191 201 15 212 157 173 22 207 98 152 222 35 198 81 228 150 69 58 235 151 189 235 60 158 11 185 141 45 211 163 168 143 70 246 22 245 106 89 139 27 234 199 78 3 105 23 184 216 92 48 185 202 208 155 175 31 229 213 13 123 245 141 8 115 20 176
arg const TQ8A 1,1,2,8 0.0031339942943304777:16 44 163 202 116 145 231 78 76 158 255 71 88 136 104 247 2
arg const TI32 8 0.0:0 -1842 -2374 350 -2551 1634 -1208 121 -1172
arg i32 2
arg i32 1
arg i32 2
arg i32 1
arg i32 2
arg bool 0
arg i32 1
arg i32 1
out TQ8A 1,2,2,8 0.4585135281085968:255 253 255 255 255 253 255 255 255 255 255 255 255 255 255 255 255 255 255 255 255 255 255 255 253 253 255 255 255 255 255 255 255
end
"#;
