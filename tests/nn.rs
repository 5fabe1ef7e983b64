//! Layers and optimizers: a whole-MLP gradient check in f64 and optimizer steps against
//! values computed by hand from PyTorch's update rules.

use espalier::gradcheck::check;
use espalier::nn::{Activation, Linear, Mlp, Module};
use espalier::rng::Rng;
use espalier::train::{Adam, Optimizer, Sgd};
use espalier::{ops, Device, Tensor};

fn rand64(shape: &[usize], rng: &mut Rng) -> Tensor {
    let n = shape.iter().product();
    Tensor::from_f64((0..n).map(|_| rng.uniform() * 2.0 - 1.0).collect(), shape).unwrap()
}

#[test]
fn two_layer_mlp_gradient_check_in_f64() {
    let mut rng = Rng::new(3);
    let inputs = vec![
        rand64(&[6, 4], &mut rng),
        rand64(&[4, 5], &mut rng),
        rand64(&[5], &mut rng),
        rand64(&[5, 3], &mut rng),
        rand64(&[3], &mut rng),
    ];
    let mlp = |t: &[Tensor]| {
        let m = Mlp {
            layers: vec![
                Linear {
                    weight: t[1].clone(),
                    bias: Some(t[2].clone()),
                },
                Linear {
                    weight: t[3].clone(),
                    bias: Some(t[4].clone()),
                },
            ],
            activation: Activation::Tanh,
        };
        m.forward(&t[0])
    };
    check(mlp, &inputs, 1e-6, 1e-6).unwrap();
}

#[test]
fn parameters_are_named_in_order() {
    let mut rng = Rng::new(0);
    let m = Mlp::new(&[3, 4, 2], Activation::Relu, &mut rng, Device::Cpu).unwrap();
    let names: Vec<String> = m
        .named_parameters("mlp")
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    assert_eq!(
        names,
        [
            "mlp.layers.0.weight",
            "mlp.layers.0.bias",
            "mlp.layers.1.weight",
            "mlp.layers.1.bias"
        ]
    );
    assert_eq!(m.num_parameters(), 3 * 4 + 4 + 4 * 2 + 2);
    assert!(Mlp::new(&[3], Activation::Relu, &mut rng, Device::Cpu).is_err());
}

fn param(v: Vec<f32>) -> Tensor {
    let n = v.len();
    Tensor::from_f32(v, &[n], Device::Cpu)
        .unwrap()
        .requires_grad_leaf()
}

/// Sets the gradient of `p` to `g` through a real backward: loss = Σ g·p.
fn set_grad(p: &Tensor, g: &[f32]) {
    let gt = Tensor::from_f32(g.to_vec(), &[g.len()], Device::Cpu).unwrap();
    ops::sum_all(&ops::mul(p, &gt).unwrap())
        .unwrap()
        .backward()
        .unwrap();
}

#[test]
fn sgd_momentum_and_weight_decay_follow_pytorch() {
    let p = param(vec![1.0, -2.0]);
    let mut opt = Sgd::new(vec![p.clone()], 0.1, 0.9, 0.01).unwrap();
    set_grad(&p, &[0.5, 0.25]);
    opt.step().unwrap();
    // d = g + 0.01 p = [0.51, 0.23]; b = d; p -= 0.1 b
    let v = p.to_vec_f32().unwrap();
    assert!(
        (v[0] - (1.0 - 0.051)).abs() < 1e-6 && (v[1] - (-2.0 - 0.023)).abs() < 1e-6,
        "{v:?}"
    );
    opt.zero_grad();
    set_grad(&p, &[0.5, 0.25]);
    opt.step().unwrap();
    // d = g + 0.01 p; b = 0.9 b + d; p -= 0.1 b
    let (p0, p1) = (1.0f64 - 0.051, -2.0f64 - 0.023);
    let b0 = 0.9 * 0.51 + (0.5 + 0.01 * p0);
    let b1 = 0.9 * 0.23 + (0.25 + 0.01 * p1);
    let v = p.to_vec_f32().unwrap();
    assert!(
        (v[0] as f64 - (p0 - 0.1 * b0)).abs() < 1e-6
            && (v[1] as f64 - (p1 - 0.1 * b1)).abs() < 1e-6,
        "{v:?}"
    );
}

#[test]
fn adam_and_adamw_follow_pytorch() {
    for decoupled in [false, true] {
        let p = param(vec![1.0, -1.0]);
        let mut opt = if decoupled {
            Adam::adamw(vec![p.clone()], 0.01, 0.1).unwrap()
        } else {
            Adam::new(vec![p.clone()], 0.01, 0.1).unwrap()
        };
        let mut reference = [1.0f64, -1.0];
        let (mut m, mut v) = ([0.0f64; 2], [0.0f64; 2]);
        for t in 1..=3 {
            opt.zero_grad();
            let g = [0.3f32 * t as f32, -0.2];
            set_grad(&p, &g);
            opt.step().unwrap();
            for i in 0..2 {
                let mut gi = g[i] as f64;
                if decoupled {
                    reference[i] *= 1.0 - 0.01 * 0.1;
                } else {
                    gi += 0.1 * reference[i];
                }
                m[i] = 0.9 * m[i] + 0.1 * gi;
                v[i] = 0.999 * v[i] + 0.001 * gi * gi;
                let mh = m[i] / (1.0 - 0.9f64.powi(t));
                let vh = v[i] / (1.0 - 0.999f64.powi(t));
                reference[i] -= 0.01 * mh / (vh.sqrt() + 1e-8);
            }
        }
        let got = p.to_vec_f32().unwrap();
        for i in 0..2 {
            assert!(
                (got[i] as f64 - reference[i]).abs() < 1e-6,
                "decoupled={decoupled}: {got:?} vs {reference:?}"
            );
        }
    }
}

#[test]
fn bad_hyper_parameters_are_errors() {
    let p = param(vec![1.0]);
    assert!(Sgd::new(vec![p.clone()], -1.0, 0.0, 0.0).is_err());
    assert!(Sgd::new(vec![p.clone()], 0.1, 1.5, 0.0).is_err());
    assert!(Adam::new(vec![p.clone()], f64::NAN, 0.0).is_err());
    assert!(Adam::new(vec![p], 0.1, -0.5).is_err());
}
