# Reference values for tests/test_validation_stats.py, from R rms::val.prob,
# glm (Wald and profile-likelihood intervals, MASS-style confint) and
# loess(surface = "direct"). Run from this folder:
#   Rscript val_prob.R
# It writes val_prob_data.csv (the inputs) and val_prob_results.csv.
suppressMessages(library(rms))
set.seed(20241)
cases <- list()
# 1: miscalibrated predictions (too extreme, too high), continuous p.
n <- 400; x <- rnorm(n)
cases[[1]] <- data.frame(case = 1, p = plogis(1.4 * x + 0.3), y = rbinom(n, 1, plogis(x)))
# 2: well calibrated, rounded probabilities (many ties).
n <- 600; p <- round(runif(n, 0.02, 0.98), 2)
cases[[2]] <- data.frame(case = 2, p = p, y = rbinom(n, 1, p))
# 3: rare outcome, small sample.
n <- 150; x <- rnorm(n, -2.5)
cases[[3]] <- data.frame(case = 3, p = plogis(0.8 * x), y = rbinom(n, 1, plogis(x)))
data <- do.call(rbind, cases)
write.csv(format(data, digits = 17), "val_prob_data.csv", row.names = FALSE, quote = FALSE)
data <- read.csv("val_prob_data.csv")  # the values as the tests read them
out <- NULL
add <- function(case, name, value) {
  out <<- rbind(out, data.frame(case = case, statistic = name, value = format(value, digits = 17)))
}
for (k in unique(data$case)) {
  d <- data[data$case == k, ]
  v <- val.prob(d$p, d$y, pl = FALSE)
  for (s in names(v)) add(k, s, v[[s]])
  lp <- qlogis(d$p)
  ctl <- glm.control(epsilon = 1e-14, maxit = 100)
  joint <- glm(d$y ~ lp, family = binomial, control = ctl)
  citl <- glm(d$y ~ 1 + offset(lp), family = binomial, control = ctl)
  wald <- confint.default(joint); prof <- confint(joint)
  add(k, "joint_intercept", coef(joint)[1]); add(k, "slope", coef(joint)[2])
  add(k, "intercept", coef(citl)[1])
  add(k, "joint_intercept_wald_low", wald[1, 1]); add(k, "joint_intercept_wald_high", wald[1, 2])
  add(k, "slope_wald_low", wald[2, 1]); add(k, "slope_wald_high", wald[2, 2])
  add(k, "joint_intercept_profile_low", prof[1, 1]); add(k, "joint_intercept_profile_high", prof[1, 2])
  add(k, "slope_profile_low", prof[2, 1]); add(k, "slope_profile_high", prof[2, 2])
  cw <- confint.default(citl); cp <- confint(citl)
  add(k, "intercept_wald_low", cw[1]); add(k, "intercept_wald_high", cw[2])
  add(k, "intercept_profile_low", cp[1]); add(k, "intercept_profile_high", cp[2])
  lo <- loess(y ~ p, data = d, span = 0.75, degree = 2, surface = "direct")
  grid <- c(0.1, 0.3, 0.5, 0.7, 0.9)
  grid <- grid[grid >= min(d$p) & grid <= max(d$p)]
  fit <- predict(lo, newdata = data.frame(p = grid))
  for (i in seq_along(grid)) add(k, sprintf("loess_%.1f", grid[i]), fit[i])
  er <- abs(d$p - predict(lo))
  add(k, "ICI_loess", mean(er)); add(k, "E50_loess", quantile(er, 0.5))
  add(k, "E90_loess", quantile(er, 0.9))
  add(k, "Emax_loess", max(er))
  lw <- lowess(d$p, d$y, iter = 0)
  for (i in c(1, 50, 100)) add(k, sprintf("lowess_%d", i), lw$y[i])
}
write.csv(out, "val_prob_results.csv", row.names = FALSE, quote = TRUE)
cat(R.version.string, "; rms", as.character(packageVersion("rms")), "\n")
