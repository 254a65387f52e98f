// RUN: recir-opt -p 'invoke-clone-serial{budget=3}' %s | filecheck %s

// fib with its calls paired: @fib_rec gets a budget argument and runs its body
// while budget is left, passing budget - 1 on; at zero it calls the serial
// clone, which has neither markers nor joins. The entry passes
// `invoke.spawn_budget` (the option, unless the runtime chose a budget for the
// call; a call that spawns nothing gets a negative one). fib's body is cheap:
// a budget check at each spawn would cost more than 1% of it, so it gets a
// clone, and no `invoke.budget_guards`.
func.func @fib(%n: i32) -> i32 {
  %r = invoke.invoke @fib_rec(%n) : (i32) -> i32
  func.return %r : i32
}
func.func private @fib_rec(%k: i32) -> i32 {
  %one = arith.constant 1 : i32
  %two = arith.constant 2 : i32
  %base = arith.cmpi sle, %k, %one : i32
  %r = scf.if %base -> (i32) {
    scf.yield %one : i32
  } else {
    %k1 = arith.subi %k, %one : i32
    %k2 = arith.subi %k, %two : i32
    %a = invoke.invoke @fib_rec(%k1) concurrent : (i32) -> i32
    %b = invoke.invoke @fib_rec(%k2) : (i32) -> i32
    %a2 = invoke.join %a : (i32) -> i32
    %s = arith.addi %a2, %b : i32
    scf.yield %s : i32
  }
  func.return %r : i32
}

// CHECK-LABEL: func.func @fib(%n: i32) -> i32 {
// CHECK-NEXT:    %{{[0-9]+}} = invoke.spawn_budget 3
// CHECK-NEXT:    %r = invoke.invoke @fib_rec(%{{[0-9]+}}, %n) : (i32, i32) -> i32
// CHECK-NEXT:    func.return %r : i32
// CHECK-NEXT:  }
// CHECK-LABEL: func.func private @fib_rec(%{{[0-9]+}}: i32, %k: i32) -> i32 {
// CHECK-NEXT:    %{{[0-9]+}} = arith.constant 0 : i32
// CHECK-NEXT:    %{{[0-9]+}} = arith.cmpi sgt, %{{[0-9]+}}, %{{[0-9]+}} : i32
// CHECK-NEXT:    %{{[0-9]+}} = scf.if %{{[0-9]+}} -> (i32) {
// CHECK-NEXT:      %{{[0-9]+}} = arith.constant 1 : i32
// CHECK-NEXT:      %{{[0-9]+}} = arith.subi %{{[0-9]+}}, %{{[0-9]+}} : i32
// CHECK-NEXT:      %one = arith.constant 1 : i32
// CHECK-NEXT:      %two = arith.constant 2 : i32
// CHECK-NEXT:      %base = arith.cmpi sle, %k, %one : i32
// CHECK-NEXT:      %r = scf.if %base -> (i32) {
// CHECK-NEXT:        scf.yield %one : i32
// CHECK-NEXT:      } else {
// CHECK-NEXT:        %k1 = arith.subi %k, %one : i32
// CHECK-NEXT:        %k2 = arith.subi %k, %two : i32
// CHECK-NEXT:        %a = invoke.invoke @fib_rec(%{{[0-9]+}}, %k1) concurrent : (i32, i32) -> i32
// CHECK-NEXT:        %b = invoke.invoke @fib_rec(%{{[0-9]+}}, %k2) : (i32, i32) -> i32
// CHECK-NEXT:        %a2 = invoke.join %a : (i32) -> i32
// CHECK-NEXT:        %s = arith.addi %a2, %b : i32
// CHECK-NEXT:        scf.yield %s : i32
// CHECK-NEXT:      }
// CHECK-NEXT:      scf.yield %r : i32
// CHECK-NEXT:    } else {
// CHECK-NEXT:      %{{[0-9]+}} = invoke.invoke @fib_rec_serial(%k) : (i32) -> i32
// CHECK-NEXT:      scf.yield %{{[0-9]+}} : i32
// CHECK-NEXT:    }
// CHECK-NEXT:    func.return %{{[0-9]+}} : i32
// CHECK-NEXT:  }
// CHECK-LABEL: func.func private @fib_rec_serial(%k: i32) -> i32 {
// CHECK-NEXT:    %one = arith.constant 1 : i32
// CHECK-NEXT:    %two = arith.constant 2 : i32
// CHECK-NEXT:    %base = arith.cmpi sle, %k, %one : i32
// CHECK-NEXT:    %r = scf.if %base -> (i32) {
// CHECK-NEXT:      scf.yield %one : i32
// CHECK-NEXT:    } else {
// CHECK-NEXT:      %k1 = arith.subi %k, %one : i32
// CHECK-NEXT:      %k2 = arith.subi %k, %two : i32
// CHECK-NEXT:      %a = invoke.invoke @fib_rec_serial(%k1) : (i32) -> i32
// CHECK-NEXT:      %b = invoke.invoke @fib_rec_serial(%k2) : (i32) -> i32
// CHECK-NEXT:      %s = arith.addi %a, %b : i32
// CHECK-NEXT:      scf.yield %s : i32
// CHECK-NEXT:    }
// CHECK-NEXT:    func.return %r : i32
// CHECK-NEXT:  }
// CHECK-NOT:   @fib__serial

// RUN: recir-opt -p 'invoke-clone-serial{budget=3}' %s | filecheck %s --check-prefix=REACH
// A public function that reaches a spawning one through a private function
// (a gradient's entry through its _fwd) gets no serial entry: the runtime
// runs it with a negative spawn budget where it must not spawn.
func.func @grad(%n: i32) -> i32 {
  %r = invoke.invoke @grad_fwd(%n) : (i32) -> i32
  func.return %r : i32
}
func.func private @grad_fwd(%n: i32) -> i32 {
  %r = invoke.invoke @fib_rec(%n) : (i32) -> i32
  func.return %r : i32
}

// REACH-LABEL: func.func @grad(%n: i32) -> i32 {
// REACH-NEXT:    %r = invoke.invoke @grad_fwd(%n) : (i32) -> i32
// REACH-LABEL: func.func private @grad_fwd(%n: i32) -> i32 {
// REACH-NEXT:    %{{[0-9]+}} = invoke.spawn_budget 3
// REACH-NEXT:    %r = invoke.invoke @fib_rec(%{{[0-9]+}}, %n) : (i32, i32) -> i32
// REACH-NOT:   __serial

// RUN: recir-opt -p 'invoke-clone-serial{budget=3}' %s | filecheck %s --check-prefix=PUBLIC
// A public function that spawns keeps its signature (the runtime calls it
// without a budget): its body moves to a private @pair_spawning, which its
// own recursive calls now invoke, and @pair starts it with the budget.
func.func @pair(%n: i32) -> i32 {
  %one = arith.constant 1 : i32
  %m = arith.subi %n, %one : i32
  %a = invoke.invoke @pair(%m) concurrent : (i32) -> i32
  %b = invoke.invoke @pair(%m) : (i32) -> i32
  %a2 = invoke.join %a : (i32) -> i32
  %s = arith.addi %a2, %b : i32
  func.return %s : i32
}

// PUBLIC-LABEL: func.func @pair(%{{[0-9]+}}: i32) -> i32 {
// PUBLIC-NEXT:    %[[B:[0-9]+]] = invoke.spawn_budget 3
// PUBLIC-NEXT:    %[[R:[0-9]+]] = invoke.invoke @pair_spawning(%[[B]], %{{[0-9]+}}) : (i32, i32) -> i32
// PUBLIC-NEXT:    func.return %[[R]] : i32
// PUBLIC-LABEL: func.func private @pair_spawning(%{{[0-9]+}}: i32, %n: i32) -> i32 {
// PUBLIC:         %a = invoke.invoke @pair_spawning(%{{[0-9]+}}, %m) concurrent : (i32, i32) -> i32
// PUBLIC:         invoke.invoke @pair_spawning_serial(%n) : (i32) -> i32
// PUBLIC-NOT:   @pair__serial

// RUN: recir-opt -p 'invoke-clone-serial{budget=3}' %s | filecheck %s --check-prefix=GUARD
// A function whose own work (a 64x64 matrix product) is at least 100 times
// its budget checks keeps one body and no clone: it is marked
// `invoke.budget_guards` (convert-recir-to-llvm spawns its concurrent invokes
// only while budget is left) and passes budget - 1 on; a cheap spawning
// function's serial clone calls it with budget 0.
func.func private @node(%k: i32, %w: tensor<64x64xf32>, %x: tensor<64xf32>) -> tensor<64xf32> {
  %one = arith.constant 1 : i32
  %m = arith.subi %k, %one : i32
  %a = invoke.invoke @node(%m, %w, %x) concurrent : (i32, tensor<64x64xf32>, tensor<64xf32>) -> tensor<64xf32>
  %b = invoke.invoke @node(%m, %w, %x) : (i32, tensor<64x64xf32>, tensor<64xf32>) -> tensor<64xf32>
  %a2 = invoke.join %a : (tensor<64xf32>) -> tensor<64xf32>
  %y = tmath.matvec %w, %a2 : tensor<64x64xf32>, tensor<64xf32> -> tensor<64xf32>
  %s = tmath.add %y, %b : tensor<64xf32>
  func.return %s : tensor<64xf32>
}
func.func private @top(%k: i32, %w: tensor<64x64xf32>, %x: tensor<64xf32>) -> i32 {
  %one = arith.constant 1 : i32
  %a = invoke.invoke @top(%k, %w, %x) concurrent : (i32, tensor<64x64xf32>, tensor<64xf32>) -> i32
  %b = invoke.invoke @node(%k, %w, %x) : (i32, tensor<64x64xf32>, tensor<64xf32>) -> tensor<64xf32>
  %a2 = invoke.join %a : (i32) -> i32
  func.return %a2 : i32
}

// GUARD-LABEL: func.func private @node(%{{[0-9]+}}: i32, %k: i32, %w: tensor<64x64xf32>, %x: tensor<64xf32>) -> tensor<64xf32> attributes {invoke.budget_guards} {
// GUARD-NEXT:    %[[ONE:[0-9]+]] = arith.constant 1 : i32
// GUARD-NEXT:    %[[LESS:[0-9]+]] = arith.subi %{{[0-9]+}}, %[[ONE]] : i32
// GUARD:         %a = invoke.invoke @node(%[[LESS]], %m, %w, %x) concurrent
// GUARD-NEXT:    %b = invoke.invoke @node(%[[LESS]], %m, %w, %x) :
// GUARD-NEXT:    %a2 = invoke.join %a
// GUARD-NOT:   @node_serial
// GUARD-LABEL: func.func private @top_serial(%k: i32, %w: tensor<64x64xf32>, %x: tensor<64xf32>) -> i32 {
// GUARD:         %[[NONE:[0-9]+]] = arith.constant 0 : i32
// GUARD-NEXT:    %b = invoke.invoke @node(%[[NONE]], %k, %w, %x) :
