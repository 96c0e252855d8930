"""Reflection: prompt templates and the reflect-then-retry step shared by training and evaluation."""
